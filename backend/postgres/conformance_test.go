package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// harness runs the suite on tables of their own per property. Backends
// connect through url (the server, or a PgBouncer in front of it); the
// harness's own out-of-band changes go to the server directly (admin).
type harness struct {
	t      *testing.T
	admin  *pgxpool.Pool
	url    string
	opts   postgres.Options
	listen bool
	fair   bool // postgres.Fair on the backend (FIFO waiters)
}

var tables atomic.Int64

func newHarness(t *testing.T, admin *pgxpool.Pool, url string, listen bool) *harness {
	n := tables.Add(1)
	return &harness{t: t, admin: admin, url: url, listen: listen, opts: postgres.Options{
		LeaseTable: fmt.Sprintf("Leases %d", n), // a space and a capital: quoting is exercised by every property
		FenceTable: fmt.Sprintf("public.fences_%d", n),
		Channel:    fmt.Sprintf("release_%d", n),
		WaitTable:  fmt.Sprintf("Waiters %d", n),
	}}
}

func (h *harness) NewBackend(ctx context.Context) (driver.Backend, error) {
	cfg, err := pgxpool.ParseConfig(h.url)
	if err != nil {
		return nil, err
	}
	return h.newBackend(ctx, cfg)
}

// newBackend is NewBackend on a pool of cfg (the server's, or a proxy's).
func (h *harness) newBackend(ctx context.Context, cfg *pgxpool.Config) (driver.Backend, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(pool.Close)
	switch {
	case h.fair && h.listen:
		l, err := postgres.NewListening(ctx, pool, h.opts, "")
		if err != nil {
			return nil, err
		}
		f, err := postgres.NewFair(ctx, l.Backend, l)
		if err != nil {
			return nil, err
		}
		return fairListening{f, l}, nil
	case h.fair:
		b, err := postgres.New(ctx, pool, h.opts)
		if err != nil {
			return nil, err
		}
		return postgres.NewFair(ctx, b, nil)
	case h.listen:
		return postgres.NewListening(ctx, pool, h.opts, "")
	}
	return postgres.New(ctx, pool, h.opts)
}

func (h *harness) leases() string { return pgx.Identifier{h.opts.LeaseTable}.Sanitize() }

// Invalidate frees the key as an operator would, keeping its fence.
func (h *harness) Invalidate(ctx context.Context, key string) error {
	_, err := h.admin.Exec(ctx, `UPDATE `+h.leases()+` SET owner = NULL, expires_at = NULL WHERE key = $1`, []byte(key))
	return err
}

// Expire ends the key's lease now, as if its TTL had passed.
func (h *harness) Expire(ctx context.Context, key string) error {
	_, err := h.admin.Exec(ctx, `UPDATE `+h.leases()+` SET expires_at = clock_timestamp() WHERE key = $1 AND owner IS NOT NULL`, []byte(key))
	return err
}

// Config: a Fair waiter's queue row lives at least 2s (fair.go's
// fairMinEntryTTL; SilentWaiter).
func (h *harness) Config() conformance.Config {
	return conformance.Config{QueuePlaceTTL: 2 * time.Second}
}

// NewGuard returns a key of a KV table of its own: the conformance
// guard is the fencing.Store of the backend.
func (h *harness) NewGuard(ctx context.Context) (conformance.Guard, error) {
	kv, err := postgres.NewKV(ctx, h.admin, fmt.Sprintf("kv_%d", tables.Add(1)), false)
	if err != nil {
		return nil, err
	}
	return kvGuard{kv}, nil
}

type kvGuard struct{ kv *postgres.KV }

func (g kvGuard) Write(ctx context.Context, token fencing.Token, holder, value string) error {
	return g.kv.Set(ctx, "guarded", value, token, holder)
}

func (g kvGuard) Read(ctx context.Context) (string, error) {
	r, err := g.kv.Get(ctx, "guarded")
	return r.Value, err
}

// server starts a PostgreSQL server and returns it with an admin pool.
// newKV returns the KV store in table ("": the default) on admin's
// database, creating the table, failing t if it cannot.
func newKV(t *testing.T, admin *pgxpool.Pool, table string) *postgres.KV {
	t.Helper()
	kv, err := postgres.NewKV(t.Context(), admin, table, false)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func server(t *testing.T) (*testserver.Postgres, *pgxpool.Pool) {
	t.Helper()
	srv := testserver.StartPostgres(t)
	admin, err := pgxpool.New(context.Background(), srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return srv, admin
}

// TestConformance runs the suite on NewListening (LISTEN/NOTIFY wake-ups)
// connected directly to a real PostgreSQL server.
func TestConformance(t *testing.T) {
	srv, admin := server(t)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, admin, srv.URL("postgres"), true)
	})
}

// TestConformancePgBouncer runs the suite on New (polling waiters)
// through a real PgBouncer in transaction pooling mode: every statement
// may run on another server connection, so nothing may rely on a session.
func TestConformancePgBouncer(t *testing.T) {
	srv, admin := server(t)
	bouncer := testserver.StartBouncer(t, srv)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return newHarness(t, admin, bouncer.URL("postgres"), false)
	})
}

// fairListening is a Fair woken by its Listening, closing the listener
// with the backend.
type fairListening struct {
	*postgres.Fair
	l *postgres.Listening
}

func (f fairListening) Close() error { return f.l.Close() }

// TestConformanceFair runs the suite on Fair (FIFO waiters, a queue
// table) with LISTEN/NOTIFY wake-ups, connected directly.
func TestConformanceFair(t *testing.T) {
	srv, admin := server(t)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		h := newHarness(t, admin, srv.URL("postgres"), true)
		h.fair = true
		return h
	})
}

// TestConformanceFairPolling runs the suite on Fair without wake-ups
// through a real PgBouncer in transaction mode.
func TestConformanceFairPolling(t *testing.T) {
	srv, admin := server(t)
	bouncer := testserver.StartBouncer(t, srv)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		h := newHarness(t, admin, bouncer.URL("postgres"), false)
		h.fair = true
		return h
	})
}
