package pgbench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// Conns is the pool's size: one connection per goroutine at the highest
// parallelism measured.
const Conns = 64

// Env is one PostgreSQL server (started by internal/testserver), a pool
// of Conns connections traced by Count, and backends on it.
type Env struct {
	Server  *testserver.Postgres
	Pool    *pgxpool.Pool
	Backend *postgres.Backend
	Fair    *postgres.Fair // FIFO waiters, polling, on Backend
	Count   *Counter
	next    atomic.Int64 // distinct keys and owners
}

// Start starts the server and opens the pool's connections before anything
// is timed (a new connection forks a server process, which costs more than
// many operations). Everything stops when tb ends.
func Start(tb testing.TB) *Env {
	tb.Helper()
	ctx := context.Background()
	e := &Env{Server: testserver.StartPostgres(tb), Count: &Counter{}}
	cfg, err := pgxpool.ParseConfig(e.Server.URL("postgres"))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = Conns, Conns
	cfg.ConnConfig.Tracer = e.Count
	if e.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Pool.Close)
	if e.Backend, err = postgres.New(ctx, e.Pool, postgres.Options{}); err != nil {
		tb.Fatal(err)
	}
	if e.Fair, err = postgres.NewFair(ctx, e.Backend, nil); err != nil {
		tb.Fatal(err)
	}
	conns := make([]*pgxpool.Conn, 0, Conns)
	for range Conns {
		c, err := e.Pool.Acquire(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return e
}

// name returns a key or owner name not used before in this Env.
func (e *Env) name(prefix string) string { return fmt.Sprintf("%s%d", prefix, e.next.Add(1)) }

// An Op is one operation of a benchmark goroutine; it is built once per
// goroutine by a Setup.
type Op func(ctx context.Context) error

// Setup returns the operation of one goroutine and its clean-up.
type Setup func(tb testing.TB, e *Env) (Op, func())

// FencedlockCycle is one Acquire and one Release of the Env's backend on
// a key of the goroutine's own.
func FencedlockCycle(_ testing.TB, e *Env) (Op, func()) { return cycle(e, e.Backend) }

// FairCycle is FencedlockCycle on the Env's [postgres.Fair]: its acquire also reads the waiters' queue, in the same
// statement.
func FairCycle(_ testing.TB, e *Env) (Op, func()) { return cycle(e, e.Fair) }

func cycle(e *Env, be driver.Backend) (Op, func()) {
	key := e.name("k")
	return func(ctx context.Context) error {
		g, err := be.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: key, TTL: time.Minute})
		if err != nil {
			return err
		}
		return be.Release(ctx, g)
	}, func() {}
}

// AdvisoryCycle is the unfenced floor: pg_advisory_lock and
// pg_advisory_unlock of an id of the goroutine's own, on one connection
// taken from the pool per cycle (a session lock must be released on the
// session that took it). No fence, no lease: the lock ends with the
// connection.
func AdvisoryCycle(_ testing.TB, e *Env) (Op, func()) {
	id := e.next.Add(1)
	return func(ctx context.Context) error {
		c, err := e.Pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
			return err
		}
		_, err = c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, id)
		return err
	}, func() {}
}

// Run times b.N operations of setup on par goroutines (par is rounded up
// to a multiple of GOMAXPROCS; 1 runs on the benchmark's goroutine) and
// reports the statements and round trips per operation (stmts/op,
// roundtrips/op) and the throughput (ops/s).
func Run(b *testing.B, e *Env, par int, setup Setup) {
	ctx := context.Background()
	s0, t0 := e.Count.Read()
	body := func(next func() bool) {
		op, done := setup(b, e)
		defer done()
		for next() {
			if err := op(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	}
	b.ResetTimer()
	if par == 1 {
		n := 0
		body(func() bool { n++; return n <= b.N })
	} else {
		b.SetParallelism(max(1, (par+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) { body(pb.Next) })
	}
	b.StopTimer()
	report(b, e, s0, t0, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// report writes the statements and round trips counted since s0, t0 per
// one of n operations.
func report(b *testing.B, e *Env, s0, t0 int64, n int) {
	s1, t1 := e.Count.Read()
	b.ReportMetric(float64(s1-s0)/float64(n), "stmts/op")
	b.ReportMetric(float64(t1-t0)/float64(n), "roundtrips/op")
}

// A Worker is one contender of a contended key: hold blocks until the key
// is held, and returns the function that releases it.
type Worker func(ctx context.Context, key string) (release func(context.Context) error, err error)

// Contended times b.N acquisitions of one key shared by workers blocking
// workers (each built by newWorker, as separate processes would be): ns/op
// is per acquisition, acquisitions/s is the total rate, handoffs/s counts the acquisitions by another worker
// than the previous holder, and stmts/op, roundtrips/op include every
// retry of a waiter.
func Contended(b *testing.B, e *Env, workers int, newWorker func(b *testing.B, e *Env) Worker) {
	ctx := context.Background()
	key := e.name("contended")
	ws := make([]Worker, workers)
	for i := range ws {
		ws[i] = newWorker(b, e)
	}
	var (
		left     atomic.Int64
		last     atomic.Int64
		handoffs atomic.Int64
		wg       sync.WaitGroup
	)
	left.Store(int64(b.N))
	last.Store(-1)
	s0, t0 := e.Count.Read()
	b.ResetTimer()
	for i, w := range ws {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				release, err := w(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				if last.Swap(int64(i)) != int64(i) {
					handoffs.Add(1)
				}
				if err := release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	report(b, e, s0, t0, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquisitions/s")
	b.ReportMetric(float64(handoffs.Load())/b.Elapsed().Seconds(), "handoffs/s")
}
