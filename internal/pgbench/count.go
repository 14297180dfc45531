// Package pgbench holds the benchmark bodies of backend/postgres, written
// once for backend/postgres's own benchmarks and for the peer comparison in
// the bench module: acquire+release at a given parallelism, contended
// hand-offs on one key, each for fencedlock's PostgreSQL backend and for
// pg_advisory_lock (the unfenced floor on the same server), with the
// statements and round trips every operation sends, counted by a pgx tracer
// on the pool.
package pgbench

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Counter is a pgx tracer (set it as the pool's ConnConfig.Tracer) that
// counts what the pool's connections send: every query, Exec and statement
// of a batch is a statement; every query, Exec, batch and prepare (pgx's
// statement cache prepares a statement on its first use on a connection)
// is a round trip. The pool's own liveness ping of an idle connection is
// not traced by pgx and not counted.
type Counter struct {
	stmts, trips atomic.Int64
}

var (
	_ pgx.QueryTracer   = (*Counter)(nil)
	_ pgx.BatchTracer   = (*Counter)(nil)
	_ pgx.PrepareTracer = (*Counter)(nil)
)

// Read returns the statements and round trips counted so far.
func (c *Counter) Read() (stmts, trips int64) { return c.stmts.Load(), c.trips.Load() }

// TraceQueryStart implements [pgx.QueryTracer]: one statement, one round trip.
func (c *Counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.stmts.Add(1)
	c.trips.Add(1)
	return ctx
}

// TraceQueryEnd implements [pgx.QueryTracer].
func (c *Counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements [pgx.BatchTracer]: one round trip.
func (c *Counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

// TraceBatchQuery implements [pgx.BatchTracer]: one statement.
func (c *Counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.stmts.Add(1)
}

// TraceBatchEnd implements [pgx.BatchTracer].
func (c *Counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracePrepareStart implements [pgx.PrepareTracer]: one round trip.
func (c *Counter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

// TracePrepareEnd implements [pgx.PrepareTracer].
func (c *Counter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}
