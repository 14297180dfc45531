package chaos

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// postgresKinds are the faults of the PostgreSQL setup: the worker and
// network faults, a crash of the server (kill-restart: SIGKILL of every
// process of it, restart through crash recovery) and an operator deleting
// the lease row.
var postgresKinds = []FaultKind{FaultPauseWorker, FaultPauseHolder, FaultBlackhole, FaultLatency, FaultReset, FaultKillRestart, FaultDelLock}

// pgSetup is the PostgreSQL server of a setup and the parent's direct
// connections to it (the operator's deletions and the final read).
type pgSetup struct {
	srv  *testserver.Postgres
	pool *pgxpool.Pool
	kv   *postgres.KV
}

// newPostgresSetup starts a PostgreSQL server whose database commits
// synchronously (the test server runs with synchronous_commit=off, which
// a crash punishes by losing acknowledged commits: fences would go back),
// creates the lock, queue and KV tables, and returns the setup with the lock and
// the register on it.
func newPostgresSetup(t *testing.T, name string) *setup {
	srv := testserver.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `ALTER DATABASE postgres SET synchronous_commit = on`)
	c.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := postgres.NewFair(ctx, b, nil); err != nil { // the waiters' table, for s.fair
		t.Fatal(err)
	}
	kv, err := postgres.NewKV(ctx, pool, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return &setup{name: name, register: RegisterPostgresKV, kinds: postgresKinds,
		postgres: &pgSetup{srv: srv, pool: pool, kv: kv}, work: *flagTTL / 2}
}

// url is the connection string of the server through addr (a worker's
// fault proxy).
func (p *pgSetup) url(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("postgres://%s@127.0.0.1:%s/postgres?sslmode=disable", p.srv.User, port)
}

// delLock deletes the lease row of lockKey as an operator would (the
// fence row stays), and returns the holder id of the lease it deleted, ""
// if the key was free or expired, read in the same statement.
func (p *pgSetup) delLock(ctx context.Context, lockKey string) (n int64, holder string, err error) {
	var owner []byte
	err = p.pool.QueryRow(ctx, fmt.Sprintf(`DELETE FROM %s WHERE key = $1
		RETURNING CASE WHEN expires_at > clock_timestamp() THEN owner END`, postgres.DefaultLeaseTable), []byte(lockKey)).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, "", nil
	case err != nil:
		return 0, "", err
	case len(owner) >= 8:
		// The table holds the owner token's SHA-256; a holder id is its
		// first 8 bytes in hex (driver.HolderID).
		return 1, hex.EncodeToString(owner[:8]), nil
	}
	return 1, "", nil
}

// register is the parent's view of the register, for the final read.
func (p *pgSetup) register(key string) register {
	return &pgRegister{kv: p.kv, pool: p.pool, key: key}
}

// TestChaosPostgres: backend/postgres on one PostgreSQL server, the
// register a postgres.KV row in the same database; worker and network
// faults, server crashes and an operator's deletions of the lease row.
func TestChaosPostgres(t *testing.T) {
	runSeeds(t, newPostgresSetup(t, "postgres"), "postgres")
}

// TestChaosPostgresFair: TestChaosPostgres with the workers' lock on
// postgres.Fair, whose waiters queue in a table and are granted in
// arrival order.
func TestChaosPostgresFair(t *testing.T) {
	s := newPostgresSetup(t, "postgres-fair")
	s.fair = true
	runSeeds(t, s, "postgres-fair")
}

// TestChaosNegativePostgresBypass is a negative control: the PostgreSQL
// workload with the register written by plain upserts (no fence check)
// under paused holders must fail (a).
func TestChaosNegativePostgresBypass(t *testing.T) {
	bypassControl(t, newPostgresSetup(t, "postgres-bypass"), "postgres register without fence check")
}
