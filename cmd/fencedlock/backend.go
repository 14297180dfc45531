//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// backendConfig is the server a command talks to, from flags or the
// environment (flags win).
type backendConfig struct {
	redisURL string
	// postgresURL is a PostgreSQL connection string (postgres.go).
	postgresURL string
	etcd        string // comma-separated endpoints
	cacert      string
	cert        string
	key         string
	user        string
	password    string
	keyPrefix   string
	// allowEvicting accepts a Redis whose maxmemory-policy may evict lock
	// keys and fence counters (redis.Options.AllowEvictingPolicy).
	allowEvicting bool
	// flags is the command's flag set (set by addBackendFlags): the etcd
	// client's log records follow its --log-format, on its output
	// (etcdlog.go).
	flags *flag.FlagSet
}

// backendsHelp is the page of `fencedlock help backends`: how every
// command names its server. The commands' own pages point to it
// (backendPointer) instead of repeating it.
const backendsHelp = `Backends: every command but demo needs a server, named by a flag or the
environment (a flag wins; a backend named by flag excludes the other one's
variable). demo uses its embedded Redis unless a flag names a server: it
reads none of these variables.

Redis:  --redis URL, or $FENCEDLOCK_REDIS
  redis://[user:password@]host:port[/db]        plain TCP; user/password for ACL or requirepass
  rediss://[user:password@]host:port[/db]       TLS, verified against the system's CAs; for a private CA
                                                set SSL_CERT_FILE=ca.pem (?skip_verify=true: testing only)
  unix://[user:password@]/run/redis/redis.sock  a Unix socket
  redis://sentinel1:26379?addr=sentinel2:26379&master_set=mymaster
                                                Sentinel: the addresses are sentinels, master_set the
                                                monitored primary; user:password are the primary's
  redis://node1:7000?addr=node2:7000&addr=node3:7000
                                                Cluster: detected from the first node that answers

etcd:   --etcd ENDPOINTS, or $FENCEDLOCK_ETCD    comma-separated, e.g. https://10.0.0.1:2379,https://10.0.0.2:2379
  --tls-ca FILE      or $FENCEDLOCK_ETCD_CACERT    CA certificate to verify the servers (https:// endpoints
                                                   without it are verified against the system's CAs)
  --tls-cert FILE    or $FENCEDLOCK_ETCD_CERT      client certificate, with --tls-key
  --tls-key FILE     or $FENCEDLOCK_ETCD_KEY       the client certificate's private key
  --user NAME        or $FENCEDLOCK_ETCD_USER      etcd authentication
  --password PW      or $FENCEDLOCK_ETCD_PASSWORD
  (--cacert, --cert and --key were renamed --tls-ca, --tls-cert and --tls-key: --key read like
  the lock's KEY. The old names are refused.)

PostgreSQL:  --postgres URL, or $FENCEDLOCK_POSTGRES
  postgres://[user:password@]host:port/dbname[?sslmode=require]
                                                any libpq URL or key=value string pgx accepts
                                                ("host=db user=app password=... dbname=app");
                                                $PGPASSWORD and ~/.pgpass are read when no password is given
  The lock tables (fencedlock_leases, fencedlock_fences) are created if missing; release --force
  --resource names keys of the fencedlock_kv table (postgres.KV). Waiters poll (safe behind a
  transaction pooler such as PgBouncer).

Redis and etcd:
  --key-prefix P     or $FENCEDLOCK_KEY_PREFIX     prefix of every lock key on the server
                                                   (default "fencedlock:" on Redis, "fencedlock/" on etcd)
  --allow-evicting-policy                          Redis: run even if maxmemory-policy may evict locks

A password in a URL or flag is visible to other users in the process list: prefer the environment.
`

// backendPointer ends the backend part of a command's page.
const backendPointer = `
Backends: --redis URL, --etcd ENDPOINTS, --postgres URL or $FENCEDLOCK_*: fencedlock help backends.
`

// addBackendFlags registers the backend flags on fs.
func addBackendFlags(fs *flag.FlagSet, c *backendConfig) {
	fs.StringVar(&c.redisURL, "redis", "", "Redis `URL` (or $FENCEDLOCK_REDIS)")
	fs.StringVar(&c.postgresURL, "postgres", "", "PostgreSQL connection `URL` (or $FENCEDLOCK_POSTGRES)")
	fs.StringVar(&c.etcd, "etcd", "", "etcd `ENDPOINTS`, comma-separated (or $FENCEDLOCK_ETCD)")
	fs.StringVar(&c.cacert, "tls-ca", "", "etcd: CA certificate `file`")
	fs.StringVar(&c.cert, "tls-cert", "", "etcd: client certificate `file`")
	fs.StringVar(&c.key, "tls-key", "", "etcd: client certificate's private key `file`")
	fs.StringVar(&c.user, "user", "", "etcd: user `name`")
	fs.StringVar(&c.password, "password", "", "etcd: `password` (prefer $FENCEDLOCK_ETCD_PASSWORD)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "`prefix` of every lock key on the server")
	fs.BoolVar(&c.allowEvicting, "allow-evicting-policy", false, "Redis: run even if maxmemory-policy may evict locks and fence counters")
	c.flags = fs
}

// renamedFlags are the backend flags renamed in v0.1.0: --key read like
// the lock's KEY (`run --redis URL --key orders -- true` took "orders" as
// a key file and "--" as KEY). The old names are refused with the new one.
var renamedFlags = map[string]string{"cacert": "tls-ca", "cert": "tls-cert", "key": "tls-key"}

// renamedFlag returns the hint for the first renamed flag among the flags
// of args (up to the first argument that is not a flag, or --), or "".
// Values of fs's flags are skipped, so `--key-prefix --key` is a prefix.
func renamedFlag(fs *flag.FlagSet, args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return ""
		}
		name := strings.TrimLeft(a, "-")
		name, _, hasValue := strings.Cut(name, "=")
		if to, ok := renamedFlags[name]; ok && fs.Lookup(name) == nil && fs.Lookup(to) != nil {
			what := map[string]string{"tls-ca": "the etcd servers' CA certificate", "tls-cert": "the etcd client certificate", "tls-key": "the etcd client certificate's private key"}[to]
			hint := fmt.Sprintf("--%s is now --%s (%s file)", name, to, what)
			if name == "key" {
				hint += "; the lock's name is KEY, the first argument after the flags"
			}
			return hint
		}
		if f := fs.Lookup(name); f != nil && !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // the flag's value
			}
		}
	}
	return ""
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
	if c.redisURL == "" && c.etcd == "" && c.postgresURL == "" {
		fill(&c.redisURL, "FENCEDLOCK_REDIS")
		fill(&c.etcd, "FENCEDLOCK_ETCD")
		fill(&c.postgresURL, "FENCEDLOCK_POSTGRES")
	}
	fill(&c.cacert, "FENCEDLOCK_ETCD_CACERT")
	fill(&c.cert, "FENCEDLOCK_ETCD_CERT")
	fill(&c.key, "FENCEDLOCK_ETCD_KEY")
	fill(&c.user, "FENCEDLOCK_ETCD_USER")
	fill(&c.password, "FENCEDLOCK_ETCD_PASSWORD")
	fill(&c.keyPrefix, "FENCEDLOCK_KEY_PREFIX")
	switch n := btoi(c.redisURL != "") + btoi(c.etcd != "") + btoi(c.postgresURL != ""); {
	case n == 0:
		return fmt.Errorf("%w: give --redis URL, --etcd ENDPOINTS or --postgres URL (or set FENCEDLOCK_REDIS, FENCEDLOCK_ETCD or FENCEDLOCK_POSTGRES)", errNoBackend)
	case n > 1:
		return fmt.Errorf("more than one of --redis, --etcd and --postgres given (possibly from FENCEDLOCK_REDIS / FENCEDLOCK_ETCD / FENCEDLOCK_POSTGRES): choose one")
	}
	if c.postgresURL != "" {
		return c.resolvePostgres()
	}
	if c.redisURL != "" {
		// A malformed URL is a usage error, found before any connection.
		if _, err := redisOptions(c.redisURL); err != nil {
			return err
		}
	}
	for _, ep := range c.endpoints() {
		if err := checkPort("--etcd", ep); err != nil {
			return err
		}
	}
	if c.redisURL != "" && (c.cacert != "" || c.cert != "" || c.key != "" || c.user != "" || c.password != "") {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key, --user and --password are for etcd; for Redis put credentials in the URL (redis://user:password@host:port, rediss:// for TLS)")
	}
	if (c.cert == "") != (c.key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together: give both or neither")
	}
	if c.user == "" && c.password != "" {
		return fmt.Errorf("--password needs --user")
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resolvePostgres checks the flags of a PostgreSQL backend: the
// connection string parses (a usage error otherwise, found before any
// connection), and no flag of the other backends is given.
func (c *backendConfig) resolvePostgres() error {
	if _, err := postgresConfig(c.postgresURL); err != nil {
		return err
	}
	if c.cacert != "" || c.cert != "" || c.key != "" || c.user != "" || c.password != "" {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key, --user and --password are for etcd; for PostgreSQL put them in the URL (postgres://user:password@host/db?sslmode=verify-full&sslrootcert=ca.pem) or use $PGPASSWORD")
	}
	if c.keyPrefix != "" {
		return fmt.Errorf("--key-prefix (or FENCEDLOCK_KEY_PREFIX) is for Redis and etcd: on PostgreSQL locks live in their own tables, keys are used as given")
	}
	if c.allowEvicting {
		return fmt.Errorf("--allow-evicting-policy is for Redis")
	}
	return nil
}

// checkPort refuses an address (host:port, or scheme://host:port/...)
// whose port is not a number from 1 to 65535: a malformed address is a
// usage error (64), found before any connection, not an unreachable
// server (69). An address without a port, or a unix:// one, passes.
func checkPort(flagName, addr string) error {
	hostport := addr
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		if strings.HasPrefix(scheme, "unix") {
			return nil
		}
		hostport = rest
	}
	if i := strings.IndexAny(hostport, "/?#"); i >= 0 {
		hostport = hostport[:i]
	}
	if i := strings.LastIndex(hostport, "@"); i >= 0 {
		hostport = hostport[i+1:]
	}
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil // no port: the client's default, or its own error
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s %s: port %q is not a number from 1 to 65535", flagName, redactURL(addr), port)
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
	if c.postgresURL != "" {
		return "postgres " + redactPostgres(c.postgresURL)
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
