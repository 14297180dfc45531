package testserver

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strconv"
	"testing"

	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TLS is a throwaway certificate authority and a server certificate for
// localhost and 127.0.0.1 signed by it, written as PEM files into a
// temporary directory.
type TLS struct {
	CAFile   string // the CA certificate (PEM)
	CertFile string // the server certificate for IP 127.0.0.1 (PEM)
	KeyFile  string // the server's private key (PEM)

	pool *x509.CertPool
}

// NewTLS generates a CA and a server certificate (clitest.WriteCerts), valid from
// an hour ago for a day.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	c := clitest.WriteCerts(t, t.TempDir())
	caPEM, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	x := &TLS{CAFile: c.CA, CertFile: c.ServerCert, KeyFile: c.ServerKey, pool: x509.NewCertPool()}
	if !x.pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("testserver: %s holds no certificate", c.CA)
	}
	return x
}

// ClientConfig returns a TLS client configuration that trusts only the
// test CA.
func (x *TLS) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: x.pool, MinVersion: tls.VersionTLS12}
}

// serverLines makes the server speak only TLS on port: "port 0" turns the
// plain TCP port off.
func (x *TLS) serverLines(port int) []string {
	return []string{
		"port 0",
		"tls-port " + strconv.Itoa(port),
		"tls-cert-file " + quote(x.CertFile),
		"tls-key-file " + quote(x.KeyFile),
		"tls-ca-cert-file " + quote(x.CAFile),
		"tls-auth-clients no",
	}
}

// WithTLS makes the server accept only TLS connections (tls-port on the
// server's port, port 0), with x's certificate. Client, ClientOption and CLI
// then use TLS and trust x's CA.
func WithTLS(x *TLS) RedisOption {
	return func(c *config) { c.tls = x }
}
