package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencedlock/fencedlock/internal/pgbench"
)

// cirello.io/pglock (v1.16.1), the lease-table library of the PostgreSQL
// peers: a lock row per name whose record version number changes at each
// acquire and heartbeat, no fence a resource could check. Its client runs
// on database/sql; here pgx's stdlib over the Env's pool, so that the
// pool's tracer counts its statements as it counts fencedlock's.

// pglockTable is the benchmark's pglock table, created once per Env.
const pglockTable = "pglock_bench"

// pglockNames makes the keys of the pglock rows distinct within a run.
var pglockNames atomic.Int64

// newPglock returns a pglock client on e's pool with lease and heartbeat
// (0: none, as the fencedlock rows call the backend without a watchdog),
// its table created.
func newPglock(tb testing.TB, e *pgbench.Env, lease, heartbeat time.Duration) *pglock.Client {
	tb.Helper()
	db := stdlib.OpenDBFromPool(e.Pool)
	tb.Cleanup(func() { _ = db.Close() })
	c, err := pglock.UnsafeNew(db, pglock.WithLeaseDuration(lease), pglock.WithHeartbeatFrequency(heartbeat), pglock.WithCustomTable(pglockTable))
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.TryCreateTable(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// pglockCycle is one AcquireContext and one ReleaseContext of pglock on a
// key of the goroutine's own (lease 1 minute, as pgbench's fencedlock
// cycle; no heartbeat).
func pglockCycle(tb testing.TB, e *pgbench.Env) (pgbench.Op, func()) {
	c := newPglock(tb, e, time.Minute, 0)
	key := fmt.Sprintf("k%d", pglockNames.Add(1))
	return func(ctx context.Context) error {
		l, err := c.AcquireContext(ctx, key)
		if err != nil {
			return err
		}
		return c.ReleaseContext(ctx, l)
	}, func() {}
}

// pglockWorker is a contended worker on a pglock client of its own (its
// own owner): a waiter retries after a whole lease duration, pglock's
// design. Lease 10s with a heartbeat every 2s, as pgbench's Lockers.
func pglockWorker(b *testing.B, e *pgbench.Env) pgbench.Worker {
	c := newPglock(b, e, 10*time.Second, 2*time.Second)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		l, err := c.AcquireContext(ctx, key)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return c.ReleaseContext(ctx, l) }, nil
	}
}

// TestPglockCycle: the pglock contender takes and releases a lock, and a
// second client cannot take a lock the first holds.
func TestPglockCycle(t *testing.T) {
	e := pgbench.Start(t)
	op, done := pglockCycle(t, e)
	defer done()
	for range 3 {
		if err := op(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newPglock(t, e, time.Minute, 0), newPglock(t, e, time.Minute, 0)
	l, err := a.AcquireContext(t.Context(), "held")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := b.AcquireContext(ctx, "held"); err == nil {
		t.Fatal("a second pglock client took a held lock")
	}
	if err := a.ReleaseContext(t.Context(), l); err != nil {
		t.Fatal(err)
	}
}
