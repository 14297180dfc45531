package clustertest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// childEnv, when set (to a data directory), turns the test binary into a
// single-member etcd server serving until its standard input closes: the
// allocation tests measure the client's allocations only, which an
// in-process server would drown in its own.
const childEnv = "FENCEDLOCK_CLUSTERTEST_ETCD_DIR"

// childBackend starts an etcd child (startChild) and returns a Backend on
// a client of it, with the gRPC dial options opts; both are closed when
// the test ends. It returns the client and the endpoint too.
func childBackend(t *testing.T, opts ...grpc.DialOption) (*etcd.Backend, *clientv3.Client, string) {
	t.Helper()
	ep := startChild(t)
	b, c := dialBackend(t, clientv3.Config{Endpoints: []string{ep}, DialOptions: opts})
	return b, c, ep
}

// startChild runs this test binary again as a single-member etcd (see
// runChild) and returns its client endpoint; it is stopped in t.Cleanup.
func startChild(t *testing.T) string {
	t.Helper()
	ep, stop, err := clitest.StartSelf("etcd child", childEnv, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return ep
}

// runChild is the etcd child's body (see childEnv).
func runChild(dir string) int {
	curl, purl := freeURL(), freeURL()
	if curl == nil || purl == nil {
		return 1
	}
	cfg := embed.NewConfig()
	cfg.Name = "alloc"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.Name + "=" + purl.String()
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // a test server on loopback: not measuring disks
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 30 s")
		return 1
	}
	fmt.Printf("READY %s\n", curl.String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func freeURL() *url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil
	}
	defer l.Close()
	return &url.URL{Scheme: "http", Host: l.Addr().String()}
}
