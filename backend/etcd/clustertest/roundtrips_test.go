package clustertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// rpcCounter counts the unary KV and Lease calls a client makes.
type rpcCounter struct {
	mu    sync.Mutex
	calls []string
}

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.calls = append(c.calls, method[strings.LastIndex(method, "/")+1:])
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// take returns and resets the calls counted so far.
func (c *rpcCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

// The round trips of each operation, counted at the client: the first
// acquire is LeaseGrant + Txn, a release one Txn (its lease goes back to the
// backend's pool), and every later acquire one Txn on a pooled lease.
func TestRoundTrips(t *testing.T) {
	e := newEnv(t)
	var rc rpcCounter
	b := e.countedBackend(1, grpc.WithChainUnaryInterceptor(rc.intercept))
	l := mustLocker(t, b, fencedlock.Options{TTL: ttl, ManualRenew: true})
	defer l.Close()
	other, _ := e.locker(2, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)

	check := func(what string, want ...string) {
		t.Helper()
		got := rc.take()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: calls %v, want %v", what, got, want)
		}
		t.Logf("%s: %d round trips %v", what, len(got), got)
	}
	rc.take()
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	check("uncontended TryAcquire", "LeaseGrant", "Txn")
	if err := ls.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	check("manual Renew (+ one LeaseKeepAlive stream message)", "Range")
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The lease goes back to the backend's pool: no LeaseRevoke follows,
	// and the next acquire reuses it (no LeaseGrant).
	check("Release (lease back to the pool)", "Txn")
	ls, err = l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	check("uncontended Acquire (queue), pooled lease", "Txn")
	ls.Release(ctx)
	waitNoLeases(t, e)
	rc.take()

	h, err := other.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k"); err == nil {
		t.Fatal("TryAcquire succeeded on a held lock")
	}
	check("contended TryAcquire (fails, leaves nothing; its pooled lease goes back)", "Txn", "LeaseTimeToLive")

	// A waiter's whole wait, hand-off included, is the one Txn that
	// enqueues it: it learns that it holds the lock from the deletion of
	// the entries ahead of it, which the backend's shared deletion watch
	// delivers, with no read of the queue and no watch of its own. Only
	// the backend's first wait, which starts that watch (this Locker's
	// leases are renewed by hand: nothing started it), reads the queue
	// once more when the watch runs.
	handoff := func(holder *fencedlock.Lease) {
		t.Helper()
		got := locktest.AcquireRelease(ctx, l, "k")
		e.waitEntries("k", 2)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	handoff(h)
	check("first contended Acquire (starts the deletion watch, re-reads once), its Release", "Txn", "Txn", "Txn")
	if h, err = other.Acquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	rc.take()
	handoff(h)
	check("contended Acquire (queued, then handed the lock) and its Release", "Txn", "Txn")
}
