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
// proxy that delays replies by 0.7s (TTL 2s, safety margin 0.8s), the
// other directly. A grant that comes back after the lease ran out locally
// is refused (ErrLateGrant) and released without touching the other
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
	locker := func(endpoint string, o fencedlock.Options) (*fencedlock.Locker, *etcd.Backend) {
		b, _ := dialBackend(t, clientv3.Config{
			Endpoints: []string{endpoint},
			Logger:    clus.Members[0].Logger.Named("lategrant-client"),
		})
		o.ReleaseTimeout = 10 * time.Second
		l := locktest.New(t, b, o)
		t.Cleanup(func() { l.Close() })
		return l, b
	}
	// A grant is a Txn on a pooled lease, after a renewal of that lease
	// (its Sent) if it was idle for a tenth of the TTL, or after a new
	// LeaseGrant if that renewal does not answer while the lease may still
	// be alive: one, two or three round trips. Each reply is 0.7s late,
	// past TTL - 2*margin (0.4s, the least time a grant may take to be
	// refused), and the Txn that follows a renewal or a LeaseGrant must
	// reach the server before the lease that renewal or grant set expires,
	// TTL - lag = 1.3s later. With the default margin (0.2s) the lag had to
	// lie in (1.6s, 2s), which left that Txn 0.25s: on a loaded machine
	// every Txn came too late ("lease not found"), Fast took every key, and
	// no grant was refused (reproduced by delaying requests by 0.3s too).
	slow, _ := locker("http://"+p.Addr(), fencedlock.Options{TTL: ttl, SafetyMargin: ttl * 2 / 5})
	fast, fb := locker(clus.Members[0].GRPCURL, fencedlock.Options{TTL: 10 * time.Second}) // Fast's lease need not be short
	s := lategranttest.Setup{Slow: slow, Fast: fast, Proxy: p, TTL: ttl, Inspect: fb.Inspect, Lag: ttl * 7 / 20}
	t.Run("TryAcquire", func(t *testing.T) { lategranttest.TryAcquires(t, s) })
	t.Run("Acquire", func(t *testing.T) { lategranttest.Acquire(t, s) })
}
