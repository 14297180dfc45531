//go:build unix

package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestRedisURLForms runs the binary against real redis-servers reached
// through the URL forms the help documents: a Unix socket with
// user:password, TLS (rediss://) with a private CA given by SSL_CERT_FILE,
// and a database number. Each run must take the lock where the URL says:
// the test reads the fence counter through its own connection.
func TestRedisURLForms(t *testing.T) {
	t.Run("unix socket", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "redis.sock")
		srv := testserver.StartRedis(t, testserver.WithUser("locker", "s3cret"), testserver.WithConfig("unixsocket "+strconv.Quote(sock), "unixsocketperm 700"))
		url := "unix://locker:s3cret@" + sock
		checkURL(t, url, nil, func() string { return get(t, srv, 0, "fencedlock:{job}:fence") })
	})
	t.Run("rediss with a private CA", func(t *testing.T) {
		dir := t.TempDir()
		certs := clitest.WriteCerts(t, dir)
		caFile, certFile, keyFile := certs.CA, certs.ServerCert, certs.ServerKey
		port := clitest.FreeTCPPort(t)
		srv := testserver.StartRedis(t, testserver.WithUser("locker", "s3cret"), testserver.WithConfig(
			"tls-port "+strconv.Itoa(port),
			"tls-cert-file "+strconv.Quote(certFile),
			"tls-key-file "+strconv.Quote(keyFile),
			"tls-ca-cert-file "+strconv.Quote(caFile),
			"tls-auth-clients no",
		))
		url := "rediss://locker:s3cret@localhost:" + strconv.Itoa(port)
		checkURL(t, url, []string{"SSL_CERT_FILE=" + caFile}, func() string { return get(t, srv, 0, "fencedlock:{job}:fence") })
		// Without the CA, the server's certificate is refused: a backend
		// error that names the problem, not a hang.
		code, p := bin.Run(t, []string{"SSL_CERT_FILE=/dev/null"}, "inspect", "--redis", url, "job")
		if code != exitBackend || !strings.Contains(p.Stderr.String(), "certificate") {
			t.Errorf("untrusted server certificate: exit %d, stderr:\n%s", code, p.Stderr)
		}
	})
	t.Run("database number and key prefix", func(t *testing.T) {
		srv, url := redisServer(t)
		checkURL(t, url+"/2", []string{"FENCEDLOCK_KEY_PREFIX=team-a:"}, func() string { return get(t, srv, 2, "team-a:{job}:fence") })
	})
}

// checkURL runs a command under the lock "job" through url, then inspects
// it, and checks that fence reads the counter the run incremented.
func checkURL(t *testing.T, url string, env []string, fence func() string) {
	t.Helper()
	env = append(env, "FENCEDLOCK_REDIS="+url)
	code, p := bin.Run(t, env, "run", "job", "--", "/bin/sh", "-c", `test "$FENCEDLOCK_FENCE" = 1`)
	if code != 0 {
		t.Fatalf("run through %s: exit %d, stderr:\n%s", url, code, p.Stderr)
	}
	code, p = bin.Run(t, env, "inspect", "--json", "job")
	if code != exitFailure || !strings.Contains(p.Stdout.String(), `"held":false`) || !strings.Contains(p.Stdout.String(), `"fence":1`) {
		t.Errorf("inspect through %s: exit %d, %s %s", url, code, p.Stdout, p.Stderr)
	}
	if got := fence(); got != "1" {
		t.Errorf("fence counter where the URL points: %q, want 1", got)
	}
}

// get reads key from database db of srv.
func get(t *testing.T, srv *testserver.Redis, db int, key string) string {
	t.Helper()
	c := srv.Client(t, nil)
	ctx := context.Background()
	// SELECT applies to one connection: use a dedicated one.
	dc, cancel := c.Dedicate()
	defer cancel()
	if err := dc.Do(ctx, dc.B().Select().Index(int64(db)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	v, err := dc.Do(ctx, dc.B().Get().Key(key).Build()).ToString()
	if err != nil {
		t.Fatalf("GET %s in db %d: %v", key, db, err)
	}
	return v
}
