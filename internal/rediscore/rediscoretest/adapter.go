package rediscoretest

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/lategranttest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/redisedge"
	"github.com/fencedlock/fencedlock/internal/seedtest"
	"github.com/fencedlock/fencedlock/internal/storetest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// FullBackend is what an adapter's Backend offers the shared tests: the
// lock, the forced release and its barrier, the fenced store, Inspect.
type FullBackend interface {
	Backend
	seedtest.Backend
}

// Adapter is one client's constructors (C is its client type): each test
// body below runs on it unchanged, so that a promise of the Redis core is
// written once and checked on both clients.
type Adapter[C any] struct {
	// Client is a new client of the server at addr, as user with password
	// ("" for none), with the client's default options, closed with the test.
	Client func(t testing.TB, addr, user, password string) C
	// Cluster is a new cluster client seeded with every node of cl.
	Cluster func(t testing.TB, cl *testserver.RedisCluster) C
	// Sentinel is a new client that finds g's master (whose credentials
	// are primary's) through the sentinels.
	Sentinel func(t testing.TB, g *testserver.Sentinels, primary *testserver.Redis) C
	// New is a Backend on c with the default options but for WAIT: with
	// replicas above 0 its grants are confirmed by WAIT
	// (Options.WaitReplicas replicas, Options.WaitTimeout timeout).
	New func(c C, replicas int, timeout time.Duration) (FullBackend, error)
	// Fixture is the Fixture of b's Store (b made by New on c).
	Fixture func(b FullBackend, c C) Fixture
}

// backend is a Backend with the default options on c, closed with the
// test, and its Fixture.
func (a Adapter[C]) backend(t testing.TB, c C) (FullBackend, Fixture) {
	t.Helper()
	b := a.waiting(t, c, 0, 0)
	return b, a.Fixture(b, c)
}

// waiting is New(c, replicas, timeout), closed with the test.
func (a Adapter[C]) waiting(t testing.TB, c C, replicas int, timeout time.Duration) FullBackend {
	t.Helper()
	return closing(t, c, func(c C) (FullBackend, error) { return a.New(c, replicas, timeout) })
}

// closing is newBackend(c), closed with the test.
func closing[C any, B driver.Backend](t testing.TB, c C, newBackend func(C) (B, error)) B {
	t.Helper()
	b, err := newBackend(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Run runs every test body below on a, each as a subtest of t: stores,
// seed, edge, late grant, a read-write lock's late acquire, a set of keys
// confirmed by WAIT.
func Run[C any](t *testing.T, a Adapter[C]) {
	t.Run("Stores", func(t *testing.T) { runStores(t, a) })
	t.Run("Seed", func(t *testing.T) { runSeed(t, a) })
	t.Run("Edge", func(t *testing.T) { runEdge(t, a) })
	t.Run("LateGrant", func(t *testing.T) { runLateGrant(t, a) })
	t.Run("RWArrivingAfterCleanup", func(t *testing.T) { runRWArrivingAfterCleanup(t, a) })
	t.Run("MultiWaitReplicas", func(t *testing.T) { runMultiWaitReplicas(t, a) })
}

// local is a client of srv (a server without credentials).
func (a Adapter[C]) local(t testing.TB, srv *testserver.Redis) C {
	return a.Client(t, srv.Addr, "", "")
}

// fixtures is runStore's newFixture: a new Backend on c per subtest.
func (a Adapter[C]) fixtures(c C) func(t *testing.T) Fixture {
	return func(t *testing.T) Fixture {
		_, f := a.backend(t, c)
		return f
	}
}

// Dial is a's [redisedge.Dial]: a Backend on a new client of addr.
func (a Adapter[C]) Dial(t testing.TB, addr, user, password string) driver.Backend {
	b, _ := a.backend(t, a.Client(t, addr, user, password))
	return b
}

// runStores runs runStore on a standalone server, a three-node Cluster and
// a primary with a replica behind three sentinels, then runStoreProgram
// and runForceReleaseBarrier on a standalone server: every promise of a's
// fenced store.
func runStores[C any](t *testing.T, a Adapter[C]) {
	t.Run("Standalone", func(t *testing.T) {
		runStore(t, a.fixtures(a.local(t, testserver.StartRedis(t))))
	})
	t.Run("Cluster", func(t *testing.T) {
		runStore(t, a.fixtures(a.Cluster(t, testserver.StartRedisCluster(t, 3))))
	})
	t.Run("Sentinel", func(t *testing.T) {
		primary := testserver.StartRedis(t)
		testserver.StartRedis(t, testserver.WithReplicaOf(primary))
		g := testserver.StartSentinels(t, primary, 3, testserver.SentinelOptions{})
		g.WaitReady(t, 1)
		runStore(t, a.fixtures(a.Sentinel(t, g, primary)))
	})
	t.Run("Program", func(t *testing.T) { runStoreProgram(t, a) })
	t.Run("ForceReleaseBarrier", func(t *testing.T) {
		b, f := a.backend(t, a.local(t, testserver.StartRedis(t)))
		runForceReleaseBarrier(t, b, f)
	})
}

// runStoreProgram runs the program every backend's fenced store runs
// (internal/storetest) on a's Backend on a real redis-server: only the
// constructor differs from memory's and etcd's.
func runStoreProgram[C any](t *testing.T, a Adapter[C]) {
	b, f := a.backend(t, a.local(t, testserver.StartRedis(t)))
	locker, err := fencedlock.New(b, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	storetest.Run(t, locker, f.Store)
}

// runSeed runs the four expectations of the original problem statement
// (internal/seedtest: one holder at a time, a lease kept past 5x its TTL,
// a late release that deletes nothing, a paused holder's write rejected)
// on a's Backend, each on its own redis-server.
func runSeed[C any](t *testing.T, a Adapter[C]) {
	seedtest.Run(t, func(t *testing.T, srv *testserver.Redis) seedtest.Backend {
		b, _ := a.backend(t, a.local(t, srv))
		return b
	})
}

// runEdge runs internal/redisedge's scenarios on a's Backend with the
// client's default options: every permission error a lock script meets is
// permanent (ACLDenials); a lock script whose reply is lost runs once and
// is not reported as not held (LostReply); Release and Close are bounded
// by ReleaseTimeout (PausedRelease).
func runEdge[C any](t *testing.T, a Adapter[C]) {
	t.Run("ACLDenials", func(t *testing.T) { redisedge.ACLDenials(t, a.Dial) })
	t.Run("LostReply", func(t *testing.T) { redisedge.LostReply(t, a.Dial) })
	t.Run("PausedRelease", func(t *testing.T) { redisedge.PausedRelease(t, a.Dial) })
}

// runLateGrant (issue 28 item 1): through a proxy that delays replies by
// 350ms, a TryAcquire of a 200ms lease is applied by the server and expires
// there before its reply arrives, and another client takes the key: the
// late grant is refused (ErrLateGrant) and released without touching the
// other's lock; a waiting Acquire (in the server's queue) keeps waiting
// until the replies are on time.
func runLateGrant[C any](t *testing.T, a Adapter[C]) {
	for name, nb := range map[string]func(testing.TB, C) driver.Backend{
		"Backend": func(t testing.TB, c C) driver.Backend { b, _ := a.backend(t, c); return b },
	} {
		t.Run(name, func(t *testing.T) {
			s := lateGrantSetup(t, a, nb)
			t.Run("TryAcquire", func(t *testing.T) { lategranttest.TryAcquires(t, s) })
			t.Run("Acquire", func(t *testing.T) { lategranttest.Acquire(t, s) })
		})
	}
}

// lateGrantSetup starts a server and a fault proxy in front of it, and
// returns the scenario's Lockers: Slow (TTL 200ms) on a client through the
// proxy, Fast (TTL 10s: its lease need not be short) on a client of its
// own; newBackend makes the backend on a client.
func lateGrantSetup[C any](t *testing.T, a Adapter[C], newBackend func(testing.TB, C) driver.Backend) lategranttest.Setup {
	t.Helper()
	srv := testserver.StartRedis(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const ttl = 200 * time.Millisecond
	locker := func(addr string, ttl time.Duration) (*fencedlock.Locker, driver.Backend) {
		b := newBackend(t, a.Client(t, addr, "", ""))
		l := locktest.New(t, b, fencedlock.Options{TTL: ttl})
		t.Cleanup(func() { l.Close() })
		return l, b
	}
	slow, _ := locker(p.Addr(), ttl)
	fast, fb := locker(srv.Addr, 10*time.Second)
	return lategranttest.Setup{Slow: slow, Fast: fast, Proxy: p, TTL: ttl, Inspect: fb.(driver.Inspector).Inspect}
}
