// Package clustertest tests the etcd backend on an in-process 3-member etcd
// cluster (go.etcd.io/etcd/tests/v3/framework/integration), with client
// bridges for blackholes and peer cuts for partitions. It is a separate
// module so that the etcd server never enters the library's dependency
// graph.
//
// Run: cd backend/etcd/clustertest && go test -race ./...
// Never with -short: the framework skips clusters under -short, so
// TestMain refuses it instead of passing vacuously.
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/pkg/v3/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "clustertest: refusing -short: the etcd framework would skip every cluster test and the run would pass without testing anything")
		os.Exit(2)
	}
	// The framework's 100 ms election timeout (10 ticks of 10 ms) makes a
	// loaded 2-core machine running -race change leaders spuriously; a
	// proposal lost in a leader change then hangs its request until the
	// caller's deadline. 30 ticks (300 ms) keeps elections quick and the
	// server's minimum lease TTL at 1 s.
	integration.ElectionTicks = 30
	os.Exit(m.Run())
}

// ttl is the lease of most tests: short, above the cluster's minimum (1 s).
const ttl = 2 * time.Second

type env struct {
	t     *testing.T
	clus  *integration.Cluster
	admin *clientv3.Client // an operator's client, on member 0
}

// newEnv starts a 3-member cluster with client bridges for t, torn down in
// t.Cleanup. It fails (never skips) when the cluster cannot run.
func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Fatal("clustertest: the cluster tests do not run with -short (the etcd framework would skip them); run without -short")
	}
	t.Cleanup(func() {
		if t.Skipped() {
			t.Errorf("clustertest: the etcd framework skipped %s; skipping is not allowed", t.Name())
		}
	})
	beforeTest(t)
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 3, UseBridge: true})
	t.Cleanup(func() { clus.Terminate(t) })
	e := &env{t: t, clus: clus}
	e.admin = e.client(0)
	return e
}

// leakWait is how long a goroutine may outlive the test that started it
// before it counts as leaked.
const leakWait = 5 * time.Second

// beforeTest is integration.BeforeTest with the framework's leak check
// replaced by one that waits. The framework's looks once (10 ms) before the
// test and skips the test if any goroutine of interest runs at that instant,
// which includes the brief goroutine of any context deadline timer firing
// then (an etcd client's or server's request deadline outliving its
// cluster): CI failed TestKeepAliveInterval that way, on
// context.WithDeadlineCause.func2 with nothing leaked. Here the test fails
// (never skips) on goroutines still running leakWait after the previous
// test ended or after this one did.
func beforeTest(t *testing.T) {
	t.Helper()
	if err := testutil.CheckAfterTest(leakWait); err != nil {
		t.Fatalf("clustertest: before %s: an earlier test %v", t.Name(), err)
	}
	integration.BeforeTest(t, integration.WithoutGoLeakDetection())
	t.Cleanup(func() {
		if t.Failed() {
			return // its goroutines may be why; the failure is reported already
		}
		if err := testutil.CheckAfterTest(leakWait); err != nil {
			t.Errorf("clustertest: %s %v", t.Name(), err)
		}
	})
}

// countedBackend returns an etcd Backend on a client of its own to member,
// dialled directly (no bridge) with extra gRPC options such as the
// counting interceptors of the round-trip tests; both are closed in
// t.Cleanup.
func (e *env) countedBackend(member int, opts ...grpc.DialOption) *etcd.Backend {
	e.t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.clus.Members[member].GRPCURL},
		DialTimeout: 5 * time.Second,
		DialOptions: opts,
		Logger:      e.clus.Members[member].Logger.Named("counted-client"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	b, err := etcd.New(c, etcd.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { b.Close() })
	return b
}

// client returns a new client connected to one member only (through its
// bridge), closed in t.Cleanup.
func (e *env) client(member int) *clientv3.Client {
	e.t.Helper()
	c, err := e.clus.NewClientV3(member)
	if err != nil {
		e.t.Fatalf("client for member %d: %v", member, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) backend(member int) *etcd.Backend {
	e.t.Helper()
	b, err := etcd.New(e.client(member), etcd.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { b.Close() })
	return b
}

// locker returns a Locker on its own client of member, closed in t.Cleanup.
func (e *env) locker(member int, opts fencedlock.Options) (*fencedlock.Locker, *etcd.Backend) {
	e.t.Helper()
	b := e.backend(member)
	if opts.TTL == 0 {
		opts.TTL = ttl
	}
	if opts.ReleaseTimeout == 0 {
		opts.ReleaseTimeout = time.Second
	}
	l := mustLocker(e.t, b, opts)
	e.t.Cleanup(func() { l.Close() })
	return l, b
}

// dir is the queue directory of a lock, as documented in package etcd.
func dir(key string) string { return etcd.DefaultKeyPrefix + "locks/" + url.PathEscape(key) + "/" }

// entries lists a lock's queue, holder first.
func (e *env) entries(key string) []*mvccpb.KeyValue {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.admin.Get(ctx, dir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Kvs
}

// leases counts the leases of the cluster that carry a key. A released
// lock's lease goes back to its backend's pool of idle leases, which carry
// no key (and which Backend.Close revokes); allLeases counts those too.
func (e *env) leases() int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.admin.Leases(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, l := range resp.Leases {
		// One bound per request: the loop's length grows with the leases
		// (over 100 pooled ones took more than 5 s in all at load 10).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := e.admin.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
		if tr.TTL > 0 && len(tr.Keys) > 0 {
			n++
		}
	}
	return n
}

// allLeases counts every lease of the cluster, idle ones included.
func (e *env) allLeases() int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.admin.Leases(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(resp.Leases)
}

// waitNoLeases waits until no lease of the cluster carries a key: a
// release deletes its key and pools its lease, a failed one revokes it in
// the background. The bound (1 s) is below the TTL of every test lease, so
// a lease left to expire with a key on it still fails the test.
func waitNoLeases(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		n := e.leases()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases carry a key 1 s after the releases", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitEntries waits (bounded) until key's queue has n entries.
func (e *env) waitEntries(key string, n int) []*mvccpb.KeyValue {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kvs := e.entries(key)
		if len(kvs) == n {
			return kvs
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("queue of %q has %d entries, want %d", key, len(kvs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// revoke revokes a lease as an operator would (etcdctl lease revoke).
func (e *env) revoke(id int64) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.admin.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
		e.t.Fatal(err)
	}
}

// leader returns the index of the leader and of the two followers.
func (e *env) leader() (lead int, followers []int) {
	lead = e.clus.WaitLeader(e.t)
	for i := range e.clus.Members {
		if i != lead {
			followers = append(followers, i)
		}
	}
	return lead, followers
}

// acquired is the result of an Acquire run in a goroutine.
type acquired struct {
	lease *fencedlock.Lease
	err   error
	at    time.Time
}

func acquireAsync(ctx context.Context, l *fencedlock.Locker, key string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		ls, err := l.Acquire(ctx, key)
		ch <- acquired{ls, err, time.Now()}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan acquired, within time.Duration, what string) acquired {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a
	case <-time.After(within):
		t.Fatalf("%s: not acquired within %v", what, within)
	}
	panic("unreachable")
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
