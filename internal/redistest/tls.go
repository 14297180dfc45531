package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is a throwaway certificate authority and a server certificate for
// 127.0.0.1 signed by it, written as PEM files into a temporary directory.
type TLS struct {
	CAFile   string // the CA certificate (PEM)
	CertFile string // the server certificate for IP 127.0.0.1 (PEM)
	KeyFile  string // the server's private key (PEM)

	pool *x509.CertPool
}

// NewTLS generates a CA and a server certificate valid for one hour.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencedlock test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: server certificate: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	x := &TLS{
		CAFile:   filepath.Join(dir, "ca.crt"),
		CertFile: filepath.Join(dir, "server.crt"),
		KeyFile:  filepath.Join(dir, "server.key"),
		pool:     x509.NewCertPool(),
	}
	x.pool.AddCert(ca)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{x.CAFile, "CERTIFICATE", caDER},
		{x.CertFile, "CERTIFICATE", srvDER},
		{x.KeyFile, "EC PRIVATE KEY", keyDER},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
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
func WithTLS(x *TLS) Option {
	return func(c *config) { c.tls = x }
}
