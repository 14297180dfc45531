package pgbench

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestCounter: on a real server, the tracer counts what the figures claim:
// a batch of three statements is three statements in one round trip, an
// uncontended Acquire+Release of the backend and a pg_advisory_lock cycle
// are two statements each, and the only round trips beyond one per
// statement are pgx's prepares (at most one per statement and connection).
func TestCounter(t *testing.T) {
	e := Start(t)
	ctx := context.Background()
	batch := &pgx.Batch{}
	for range 3 {
		batch.Queue(`SELECT 1`)
	}
	s0, t0 := e.Count.Read()
	if err := e.Pool.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	if s, tr := e.Count.Read(); s-s0 != 3 || tr-t0 > 1+3 || tr-t0 < 1 {
		t.Fatalf("batch of 3: %d statements, %d round trips; want 3 and 1 (plus a prepare per new statement)", s-s0, tr-t0)
	}
	const n = 50
	for _, c := range []struct {
		name  string
		setup Setup
	}{{"fencedlock", FencedlockCycle}, {"pg_advisory_lock", AdvisoryCycle}} {
		op, done := c.setup(t, e)
		s0, t0 := e.Count.Read()
		for range n {
			if err := op(ctx); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		done()
		s, tr := e.Count.Read()
		if s-s0 != 2*n {
			t.Errorf("%s: %d statements in %d cycles, want %d", c.name, s-s0, n, 2*n)
		}
		if extra := (tr - t0) - (s - s0); extra < 0 || extra > 2*Conns {
			t.Errorf("%s: %d round trips for %d statements: more than one prepare per statement and connection", c.name, tr-t0, s-s0)
		}
	}
}
