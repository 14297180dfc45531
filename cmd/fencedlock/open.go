//go:build unix

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// openBackend connects to the server c names. The returned function closes
// the backend and its client.
func openBackend(ctx context.Context, c backendConfig) (driver.Backend, func(), error) {
	ctx, cancel := openContext(ctx)
	defer cancel()
	switch {
	case c.redisURL != "":
		return openRedis(ctx, c)
	case c.postgresURL != "":
		return openPostgres(ctx, c)
	}
	return openEtcd(ctx, c)
}

// redisOptions turns a URL into rueidis options (see backendsHelp for the
// forms).
func redisOptions(raw string) (rueidis.ClientOption, error) {
	const want = "want redis://[user:password@]host:port[/db], rediss://..., or unix:///path; percent-encode / ? # @ in a password"
	// The errors of url.Parse and rueidis quote the URL, password and
	// all: none of their text is shown but what is scrubbed.
	u, err := url.Parse(raw)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("--redis %s: malformed URL (%s)", redactURL(raw), want)
	}
	if u.User == nil && strings.Contains(raw, "@") {
		return rueidis.ClientOption{}, fmt.Errorf("--redis %s: malformed URL: \"@\" outside user:password@ (%s)", redactURL(raw), want)
	}
	if err := checkPort("--redis", raw); err != nil {
		return rueidis.ClientOption{}, err
	}
	for _, a := range u.Query()["addr"] {
		if err := checkPort("--redis", a); err != nil {
			return rueidis.ClientOption{}, err
		}
	}
	opt, err := rueidis.ParseURL(raw)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), raw, redactURL(raw))
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
		return opt, fmt.Errorf("--redis %s: %s (%s)", redactURL(raw), msg, want)
	}
	// fencedlock reads nothing that a client-side cache could serve, and
	// some servers (and miniredis) lack CLIENT TRACKING.
	opt.DisableCache = true
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = 5 * time.Second
	}
	return opt, nil
}

func openRedis(ctx context.Context, c backendConfig) (driver.Backend, func(), error) {
	client, b, err := dialRedis(c)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close(); client.Close() }, nil
}

// dialRedis connects to the Redis server c names and returns the client
// with the backend on it (the demo also writes through the client).
func dialRedis(c backendConfig) (rueidis.Client, *redisb.Backend, error) {
	opt, err := redisOptions(c.redisURL)
	if err != nil {
		return nil, nil, err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w (is the server running, and are the address and credentials right?)", c.describe(), err)
	}
	b, err := redisb.New(client, redisb.Options{KeyPrefix: c.keyPrefix, AllowEvictingPolicy: c.allowEvicting})
	if errors.Is(err, redisb.ErrEvictionPolicy) {
		client.Close()
		return nil, nil, fmt.Errorf("%w (--allow-evicting-policy to run anyway)", err)
	}
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, b, nil
}

func openEtcd(ctx context.Context, c backendConfig) (driver.Backend, func(), error) {
	client, b, err := dialEtcd(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close(); client.Close() }, nil
}

// dialEtcd connects to the etcd cluster c names and returns the client
// with the backend on it (the demo also writes through the client).
func dialEtcd(ctx context.Context, c backendConfig) (*clientv3.Client, *etcdb.Backend, error) {
	eps := c.endpoints()
	if len(eps) == 0 {
		return nil, nil, fmt.Errorf("--etcd %q names no endpoint (want host:port or https://host:port, comma-separated)", c.etcd)
	}
	cfg := clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Username:    c.user,
		Password:    c.password,
	}
	tlsCfg, err := etcdTLS(c, eps)
	if err != nil {
		return nil, nil, err
	}
	cfg.TLS = tlsCfg
	cfg.Logger = etcdLogger(c.flags) // expected outcomes demoted, the rest through the command's log (etcdlog.go)
	client, err := clientv3.New(cfg)
	if err != nil {
		// With a user, New authenticates at once.
		return nil, nil, fmt.Errorf("connecting to %s: %w%s (is the cluster running, and are the endpoints, certificates and credentials right?)", c.describe(), err, diagnose(eps, tlsCfg))
	}
	// clientv3 connects lazily: read (a count under the prefix) now, so
	// that a wrong address or credentials fail here with a clear message.
	prefix := c.keyPrefix
	if prefix == "" {
		prefix = etcdb.DefaultKeyPrefix
	}
	if _, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("connecting to %s: %w%s (is the cluster running, and are the endpoints, certificates and credentials right?)", c.describe(), err, diagnose(eps, tlsCfg))
	}
	b, err := etcdb.New(client, etcdb.Options{KeyPrefix: c.keyPrefix})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, b, nil
}

// etcdTLS returns the TLS configuration of the etcd client: from the files
// given, or the system's roots when an endpoint is https:// and no file is.
func etcdTLS(c backendConfig, eps []string) (*tls.Config, error) {
	https := false
	for _, ep := range eps {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			https = true
		}
	}
	if c.cacert == "" && c.cert == "" && !https {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in the file", c.cacert)
		}
		cfg.RootCAs = pool
	}
	if c.cert != "" {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// diagnose finds why no etcd endpoint answered, for the error message: the
// gRPC client reports only a timeout. It dials each endpoint once (with
// TLS when configured) and returns " (endpoint: reason; ...)", or "" if
// every endpoint accepts a connection.
func diagnose(eps []string, tlsCfg *tls.Config) string {
	var reasons []string
	for _, ep := range eps {
		if err := probe(ep, tlsCfg); err != nil {
			reasons = append(reasons, ep+": "+err.Error())
		}
	}
	if len(reasons) == 0 {
		return ""
	}
	return " (" + strings.Join(reasons, "; ") + ")"
}

func probe(ep string, tlsCfg *tls.Config) error {
	const timeout = 2 * time.Second
	hostport := ep
	if i := strings.Index(hostport, "://"); i >= 0 {
		if strings.HasPrefix(hostport, "unix") {
			return nil // not probed
		}
		hostport = hostport[i+3:]
	}
	hostport = strings.TrimSuffix(hostport, "/")
	conn, err := net.DialTimeout("tcp", hostport, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tlsCfg == nil {
		return nil
	}
	cfg := tlsCfg.Clone()
	if host, _, err := net.SplitHostPort(hostport); err == nil && cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		return err
	}
	// With TLS 1.3 the server checks the client certificate after the
	// client's handshake is done: a refusal arrives as an alert on the
	// first read. A server that accepts sends its HTTP/2 settings instead.
	_ = tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var buf [1]byte
	if _, err := tc.Read(buf[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}
