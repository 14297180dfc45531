//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
)

// backendConfig is the server a command talks to, from flags or the
// environment (flags win).
type backendConfig struct {
	redisURL  string
	etcd      string // comma-separated endpoints
	cacert    string
	cert      string
	key       string
	user      string
	password  string
	keyPrefix string
	// allowEvicting accepts a Redis whose maxmemory-policy may evict lock
	// keys and fence counters (redis.Options.AllowEvictingPolicy).
	allowEvicting bool
}

const backendHelp = `
Backends (flags win over the environment):
  Redis:  --redis URL, or $FENCEDLOCK_REDIS
            redis://[user:password@]host:port[/db]       plain TCP; user/password for ACL or requirepass
            rediss://[user:password@]host:port[/db]      TLS, verified against the system's CAs; for a private CA
                                                         set SSL_CERT_FILE=ca.pem (?skip_verify=true: testing only)
            unix://[user:password@]/run/redis/redis.sock a Unix socket
            redis://sentinel1:26379?addr=sentinel2:26379&master_set=mymaster
                                                         Sentinel: the addresses are sentinels, master_set the
                                                         monitored primary; user:password are the primary's
            redis://node1:7000?addr=node2:7000&addr=node3:7000
                                                         Cluster: detected from the first node that answers
  etcd:   --etcd ENDPOINTS, or $FENCEDLOCK_ETCD            comma-separated, e.g. https://10.0.0.1:2379,https://10.0.0.2:2379
            --cacert, --cert, --key (or $FENCEDLOCK_ETCD_CACERT, _CERT, _KEY) for TLS
            --user, --password (or $FENCEDLOCK_ETCD_USER, _PASSWORD) for etcd authentication
  A password in a URL or flag is visible to other users in the process list: prefer the environment.
`

// addBackendFlags registers the backend flags on fs.
func addBackendFlags(fs *flag.FlagSet, c *backendConfig) {
	fs.StringVar(&c.redisURL, "redis", "", "Redis `URL` (or $FENCEDLOCK_REDIS); see Backends below")
	fs.StringVar(&c.etcd, "etcd", "", "etcd `ENDPOINTS`, comma-separated (or $FENCEDLOCK_ETCD)")
	fs.StringVar(&c.cacert, "cacert", "", "etcd: CA certificate `file` to verify the servers (or $FENCEDLOCK_ETCD_CACERT)")
	fs.StringVar(&c.cert, "cert", "", "etcd: client certificate `file` (or $FENCEDLOCK_ETCD_CERT)")
	fs.StringVar(&c.key, "key", "", "etcd: client private key `file` (or $FENCEDLOCK_ETCD_KEY)")
	fs.StringVar(&c.user, "user", "", "etcd: user `name` (or $FENCEDLOCK_ETCD_USER)")
	fs.StringVar(&c.password, "password", "", "etcd: `password` (or $FENCEDLOCK_ETCD_PASSWORD)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "`prefix` added to every lock key on the server (or $FENCEDLOCK_KEY_PREFIX)")
	fs.BoolVar(&c.allowEvicting, "allow-evicting-policy", false, "Redis: run even if the server's maxmemory-policy may evict lock keys and fence counters\n(two holders at once, fences restarting at 1); without it such a server is refused")
}

var errNoBackend = errors.New("no backend")

// resolve fills unset fields from the environment and checks that exactly
// one backend is chosen.
func (c *backendConfig) resolve(getenv func(string) string) error {
	fill := func(v *string, name string) {
		if *v == "" {
			*v = getenv(name)
		}
	}
	// A backend named by flag excludes the other one's environment variable.
	if c.redisURL == "" && c.etcd == "" {
		fill(&c.redisURL, "FENCEDLOCK_REDIS")
		fill(&c.etcd, "FENCEDLOCK_ETCD")
	}
	fill(&c.cacert, "FENCEDLOCK_ETCD_CACERT")
	fill(&c.cert, "FENCEDLOCK_ETCD_CERT")
	fill(&c.key, "FENCEDLOCK_ETCD_KEY")
	fill(&c.user, "FENCEDLOCK_ETCD_USER")
	fill(&c.password, "FENCEDLOCK_ETCD_PASSWORD")
	fill(&c.keyPrefix, "FENCEDLOCK_KEY_PREFIX")
	switch {
	case c.redisURL == "" && c.etcd == "":
		return fmt.Errorf("%w: give --redis URL or --etcd ENDPOINTS (or set FENCEDLOCK_REDIS or FENCEDLOCK_ETCD)", errNoBackend)
	case c.redisURL != "" && c.etcd != "":
		return fmt.Errorf("both --redis and --etcd given (possibly from FENCEDLOCK_REDIS / FENCEDLOCK_ETCD): choose one")
	}
	if c.redisURL != "" {
		// A malformed URL is a usage error, found before any connection.
		if _, err := redisOptions(c.redisURL); err != nil {
			return err
		}
	}
	if c.redisURL != "" && (c.cacert != "" || c.cert != "" || c.key != "" || c.user != "" || c.password != "") {
		return fmt.Errorf("--cacert, --cert, --key, --user and --password are for etcd; for Redis put credentials in the URL (redis://user:password@host:port, rediss:// for TLS)")
	}
	if (c.cert == "") != (c.key == "") {
		return fmt.Errorf("--cert and --key go together: give both or neither")
	}
	if c.user == "" && c.password != "" {
		return fmt.Errorf("--password needs --user")
	}
	return nil
}

// endpoints splits the etcd endpoint list.
func (c *backendConfig) endpoints() []string {
	var eps []string
	for _, ep := range strings.Split(c.etcd, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// describe names the backend for messages, without credentials.
func (c *backendConfig) describe() string {
	if c.redisURL != "" {
		return "redis " + redactURL(c.redisURL)
	}
	return "etcd " + strings.Join(c.endpoints(), ",")
}

// redactURL hides the password of a URL. A URL that does not parse with
// its user information (a password holding "/", "?" or "#" that is not
// percent-encoded ends the host part early) loses everything before its
// last "@".
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if u, err := url.Parse(s); ok && err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
		return s
	}
	if i := strings.LastIndex(rest, "@"); ok && i >= 0 {
		return scheme + "://xxxxx" + rest[i:]
	}
	if i := strings.LastIndex(s, "@"); !ok && i >= 0 {
		return "xxxxx" + s[i:]
	}
	return s
}

// openContext bounds how long opening a backend may take.
func openContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, openTimeout)
}
