package etcdtest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/fencedlock/fencedlock/backend/etcd/clustertest/harness"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestEtcdTLSAndAuth: the binary reaches a cluster that requires client
// certificates and etcd authentication, with --tls-ca/--tls-cert/--tls-key and
// --user/--password or their environment variables, and fails with the
// backend exit code and a hint when one of them is missing or wrong.
func TestEtcdTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	files := clitest.WriteCerts(t, dir)
	harness.BeforeTest(t, "etcdtest")
	clus := integration.NewCluster(t, &integration.ClusterConfig{
		Size:   1,
		UseTCP: true,
		UseIP:  true,
		ClientTLS: &transport.TLSInfo{
			CertFile:       files.ServerCert,
			KeyFile:        files.ServerKey,
			TrustedCAFile:  files.CA,
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

	tlsFlags := []string{"--etcd", ep, "--tls-ca", files.CA, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey}
	args := append(append([]string{"run"}, tlsFlags...), "--user", "locker", "--password", "lockpw", "job", "--", "/bin/sh", "-c", `test -n "$FENCEDLOCK_FENCE"`)
	if code, p := bin.Run(t, nil, args...); code != 0 {
		t.Fatalf("run with TLS and auth flags: exit %d, stderr:\n%s", code, p.Stderr)
	}
	env := []string{
		"FENCEDLOCK_ETCD=" + ep,
		"FENCEDLOCK_ETCD_CACERT=" + files.CA,
		"FENCEDLOCK_ETCD_CERT=" + files.ClientCert,
		"FENCEDLOCK_ETCD_KEY=" + files.ClientKey,
		"FENCEDLOCK_ETCD_USER=locker",
		"FENCEDLOCK_ETCD_PASSWORD=lockpw",
	}
	code, p := bin.Run(t, env, "inspect", "--json", "job")
	if code != 1 || !strings.Contains(p.Stdout.String(), `"held":false`) { // 1: free
		t.Errorf("inspect with TLS and auth from the environment: exit %d: %s %s", code, p.Stdout, p.Stderr)
	}

	bad := []struct {
		name string
		args []string
		want string
	}{
		{"wrong password", append(append([]string{"inspect"}, tlsFlags...), "--user", "locker", "--password", "nope", "job"), "credentials"},
		{"no client certificate", []string{"inspect", "--etcd", ep, "--tls-ca", files.CA, "--user", "locker", "--password", "lockpw", "job"}, "certificates"},
		{"unknown CA", append([]string{"inspect", "--etcd", ep, "--tls-cert", files.ClientCert, "--tls-key", files.ClientKey, "--user", "locker", "--password", "lockpw"}, "job"), "certificates"},
		{"missing CA file", []string{"inspect", "--etcd", ep, "--tls-ca", filepath.Join(dir, "nope.pem"), "job"}, "--tls-ca"},
	}
	for _, tc := range bad {
		code, p := bin.Run(t, nil, tc.args...)
		t.Logf("%s: exit %d: %s", tc.name, code, strings.TrimSpace(p.Stderr.String()))
		if code != exitBackend || !strings.Contains(p.Stderr.String(), tc.want) {
			t.Errorf("%s: exit %d (want %d), stderr (want %q):\n%s", tc.name, code, exitBackend, tc.want, p.Stderr)
		}
		if strings.Contains(p.Stderr.String(), "lockpw") {
			t.Errorf("%s: stderr shows the password", tc.name)
		}
	}
}
