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
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/etcd/clustertest/harness"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	harness.Setup("clustertest")
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
	harness.BeforeTest(t, "clustertest")
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 3, UseBridge: true})
	t.Cleanup(func() { clus.Terminate(t) })
	e := &env{t: t, clus: clus}
	e.admin = e.client(0)
	return e
}

// countedBackend returns an etcd Backend on a client of its own to member,
// dialled directly (no bridge) with extra gRPC options such as the
// counting interceptors of the round-trip tests; both are closed in
// t.Cleanup.
func (e *env) countedBackend(member int, opts ...grpc.DialOption) *etcd.Backend {
	e.t.Helper()
	b, _ := dialBackend(e.t, clientv3.Config{
		Endpoints:   []string{e.clus.Members[member].GRPCURL},
		DialOptions: opts,
		Logger:      e.clus.Members[member].Logger.Named("counted-client"),
	})
	return b
}

// dialBackend returns an etcd Backend on a new client of cfg (its dial
// bounded by 5s) and the client; both are closed in t.Cleanup.
func dialBackend(t *testing.T, cfg clientv3.Config) (*etcd.Backend, *clientv3.Client) {
	t.Helper()
	cfg.DialTimeout = 5 * time.Second
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b, err := etcd.New(c, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, c
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
	n := 0
	for _, l := range e.leaseList() {
		// One bound per request: the loop's length grows with the leases
		// (over 100 pooled ones took more than 5 s in all at load 10).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tr, err := e.admin.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
		// TTL is whole seconds left, -1 if the lease is gone: 0 is a
		// lease with less than a second left, which still counts.
		if tr.TTL >= 0 && len(tr.Keys) > 0 {
			n++
		}
	}
	return n
}

// allLeases counts every lease of the cluster, idle ones included.
func (e *env) allLeases() int {
	e.t.Helper()
	return len(e.leaseList())
}

// leaseList lists every lease of the cluster.
func (e *env) leaseList() []clientv3.LeaseStatus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.admin.Leases(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Leases
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

// queuedBehind has three clients, on members 0, 1 and 2, take key in
// turn: H holds it, W queues behind H, C behind W. It returns H's lease,
// W's and C's pending Acquires and the key's entries (H's, W's, C's).
func (e *env) queuedBehind(ctx context.Context, key string) (*fencedlock.Lease, <-chan acquired, <-chan acquired, []*mvccpb.KeyValue) {
	e.t.Helper()
	hl, _ := e.locker(0, fencedlock.Options{})
	wl, _ := e.locker(1, fencedlock.Options{})
	cl, _ := e.locker(2, fencedlock.Options{})
	h, err := hl.Acquire(ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	wch := acquireAsync(ctx, wl, key)
	e.waitEntries(key, 2)
	cch := acquireAsync(ctx, cl, key)
	return h, wch, cch, e.waitEntries(key, 3)
}

// healer returns a function that ends the blackhole of bridge, once; it
// also runs when the test ends.
func healer(t *testing.T, bridge interface{ Unblackhole() }) func() {
	healed := false
	heal := func() {
		if !healed {
			bridge.Unblackhole()
			healed = true
		}
	}
	t.Cleanup(heal)
	return heal
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
