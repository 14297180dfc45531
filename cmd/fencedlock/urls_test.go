//go:build unix

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestRedisURLForms runs the binary against real redis-servers reached
// through the URL forms the help documents: a Unix socket with
// user:password, TLS (rediss://) with a private CA given by SSL_CERT_FILE,
// and a database number. Each run must take the lock where the URL says:
// the test reads the fence counter through its own connection.
func TestRedisURLForms(t *testing.T) {
	t.Run("unix socket", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "redis.sock")
		srv := redistest.Start(t, redistest.WithUser("locker", "s3cret"), redistest.WithConfig("unixsocket "+strconv.Quote(sock), "unixsocketperm 700"))
		url := "unix://locker:s3cret@" + sock
		checkURL(t, url, nil, func() string { return get(t, srv, 0, "fencedlock:{job}:fence") })
	})
	t.Run("rediss with a private CA", func(t *testing.T) {
		dir := t.TempDir()
		caFile, certFile, keyFile := writeTLSFiles(t, dir)
		port := freeTCPPort(t)
		srv := redistest.Start(t, redistest.WithUser("locker", "s3cret"), redistest.WithConfig(
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
		code, p := runBin(t, []string{"SSL_CERT_FILE=/dev/null"}, "inspect", "--redis", url, "job")
		if code != exitBackend || !strings.Contains(p.stderr.String(), "certificate") {
			t.Errorf("untrusted server certificate: exit %d, stderr:\n%s", code, p.stderr)
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
	code, p := runBin(t, env, "run", "job", "--", "/bin/sh", "-c", `test "$FENCEDLOCK_FENCE" = 1`)
	if code != 0 {
		t.Fatalf("run through %s: exit %d, stderr:\n%s", url, code, p.stderr)
	}
	code, p = runBin(t, env, "inspect", "--json", "job")
	if code != 0 || !strings.Contains(p.stdout.String(), `"held":false`) || !strings.Contains(p.stdout.String(), `"fence":1`) {
		t.Errorf("inspect through %s: exit %d, %s %s", url, code, p.stdout, p.stderr)
	}
	if got := fence(); got != "1" {
		t.Errorf("fence counter where the URL points: %q, want 1", got)
	}
}

// get reads key from database db of srv.
func get(t *testing.T, srv *redistest.Server, db int, key string) string {
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

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeTLSFiles writes a CA and a server certificate for localhost and
// 127.0.0.1 signed by it, in PEM files.
func writeTLSFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencedlock test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
