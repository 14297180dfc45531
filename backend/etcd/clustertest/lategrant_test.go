package clustertest

import (
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/etcd/clustertest/harness"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/lategranttest"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// TestLateGrantRefused (issue 28 item 1) runs the late-grant scenario of
// internal/lategranttest on etcd: one Locker reaches a one-member cluster
// (on TCP, so that internal/faultproxy can sit in front of it) through a
// proxy that delays replies by 1.75s (TTL 2s), the other directly. A grant that comes back after the lease ran out locally is
// refused (ErrLateGrant) and released without touching the other
// Locker's lock; a waiting Acquire (the server's queue) keeps waiting
// until the replies are on time.
func TestLateGrantRefused(t *testing.T) {
	harness.BeforeTest(t, "clustertest")
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 1, UseTCP: true})
	t.Cleanup(func() { clus.Terminate(t) })
	u, err := url.Parse(clus.Members[0].GRPCURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	locker := func(endpoint string, ttl time.Duration) (*fencedlock.Locker, *etcd.Backend) {
		b, _ := dialBackend(t, clientv3.Config{
			Endpoints: []string{endpoint},
			Logger:    clus.Members[0].Logger.Named("lategrant-client"),
		})
		l := locktest.New(t, b, fencedlock.Options{TTL: ttl, ReleaseTimeout: 10 * time.Second})
		t.Cleanup(func() { l.Close() })
		return l, b
	}
	slow, _ := locker("http://"+p.Addr(), ttl)
	fast, fb := locker(clus.Members[0].GRPCURL, 10*time.Second) // Fast's lease need not be short
	// A grant is a Txn on a pooled lease, after a renewal of that lease
	// (its Sent) if it was idle for a tenth of the TTL: one or two round
	// trips, each 1.75s with the replies 1.75s late, past the local
	// deadline less the margin (1.6s); the Txn reaches the server while
	// the lease renewed at 0 is still alive (2s).
	s := lategranttest.Setup{Slow: slow, Fast: fast, Proxy: p, TTL: ttl, Inspect: fb.Inspect, Lag: ttl * 7 / 8}
	t.Run("TryAcquire", func(t *testing.T) { lategranttest.TryAcquires(t, s) })
	t.Run("Acquire", func(t *testing.T) { lategranttest.Acquire(t, s) })
}
