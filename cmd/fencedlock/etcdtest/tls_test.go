package etcdtest

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
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
)

// TestEtcdTLSAndAuth: the binary reaches a cluster that requires client
// certificates and etcd authentication, with --cacert/--cert/--key and
// --user/--password or their environment variables, and fails with the
// backend exit code and a hint when one of them is missing or wrong.
func TestEtcdTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	files := writeCerts(t, dir)
	t.Cleanup(func() {
		if t.Skipped() {
			t.Errorf("etcdtest: the etcd framework skipped %s; skipping is not allowed", t.Name())
		}
	})
	integration.BeforeTest(t)
	clus := integration.NewCluster(t, &integration.ClusterConfig{
		Size:   1,
		UseTCP: true,
		UseIP:  true,
		ClientTLS: &transport.TLSInfo{
			CertFile:       files["server.pem"],
			KeyFile:        files["server-key.pem"],
			TrustedCAFile:  files["ca.pem"],
			ClientCertAuth: true,
		},
	})
	t.Cleanup(func() { clus.Terminate(t) })
	ep := clus.Members[0].GRPCURL
	if !strings.HasPrefix(ep, "https://") {
		t.Fatalf("endpoint %q is not TLS", ep)
	}
	admin, err := clus.NewClientV3(0)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "locker", "fencedlock/", clientv3.GetPrefixRangeEnd("fencedlock/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "locker", "lockpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "locker", "locker"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}

	tlsFlags := []string{"--etcd", ep, "--cacert", files["ca.pem"], "--cert", files["client.pem"], "--key", files["client-key.pem"]}
	args := append(append([]string{"run"}, tlsFlags...), "--user", "locker", "--password", "lockpw", "job", "--", "/bin/sh", "-c", `test -n "$FENCEDLOCK_FENCE"`)
	if code, p := runBin(t, nil, args...); code != 0 {
		t.Fatalf("run with TLS and auth flags: exit %d, stderr:\n%s", code, p.stderr)
	}
	env := []string{
		"FENCEDLOCK_ETCD=" + ep,
		"FENCEDLOCK_ETCD_CACERT=" + files["ca.pem"],
		"FENCEDLOCK_ETCD_CERT=" + files["client.pem"],
		"FENCEDLOCK_ETCD_KEY=" + files["client-key.pem"],
		"FENCEDLOCK_ETCD_USER=locker",
		"FENCEDLOCK_ETCD_PASSWORD=lockpw",
	}
	code, p := runBin(t, env, "inspect", "--json", "job")
	if code != 0 || !strings.Contains(p.stdout.String(), `"held":false`) {
		t.Errorf("inspect with TLS and auth from the environment: exit %d: %s %s", code, p.stdout, p.stderr)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"wrong password", append(append([]string{"inspect"}, tlsFlags...), "--user", "locker", "--password", "nope", "job"), "credentials"},
		{"no client certificate", []string{"inspect", "--etcd", ep, "--cacert", files["ca.pem"], "--user", "locker", "--password", "lockpw", "job"}, "certificates"},
		{"unknown CA", append([]string{"inspect", "--etcd", ep, "--cert", files["client.pem"], "--key", files["client-key.pem"], "--user", "locker", "--password", "lockpw"}, "job"), "certificates"},
		{"missing CA file", []string{"inspect", "--etcd", ep, "--cacert", filepath.Join(dir, "nope.pem"), "job"}, "--cacert"},
	}
	for _, tc := range bad {
		code, p := runBin(t, nil, tc.args...)
		t.Logf("%s: exit %d: %s", tc.name, code, strings.TrimSpace(p.stderr.String()))
		if code != exitBackend || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%s: exit %d (want %d), stderr (want %q):\n%s", tc.name, code, exitBackend, tc.want, p.stderr)
		}
		if strings.Contains(p.stderr.String(), "lockpw") {
			t.Errorf("%s: stderr shows the password", tc.name)
		}
	}
}

// writeCerts writes a CA, a server certificate for 127.0.0.1 and
// localhost (also usable as a client certificate, as the framework's own
// clients present it) and a client certificate, as PEM files.
func writeCerts(t *testing.T, dir string) map[string]string {
	t.Helper()
	now := time.Now()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	files := map[string]string{}
	write := func(name, typ string, der []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		files[name] = p
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, cn string, usage []x509.ExtKeyUsage) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(name+".pem", "CERTIFICATE", der)
		write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	leaf("server", 2, "localhost", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	leaf("client", 3, "fencedlock-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	return files
}
