package postgres_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

func newBackend(t *testing.T, admin *pgxpool.Pool, opts postgres.Options) *postgres.Backend {
	t.Helper()
	b, err := postgres.New(t.Context(), admin, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func grab(t *testing.T, b driver.Backend, key, owner string) driver.Grant {
	t.Helper()
	g, err := b.Acquire(t.Context(), driver.AcquireRequest{Key: key, Owner: owner, TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return g
}

// TestFenceSurvivesTruncate: a TRUNCATE of either table alone (or a DELETE
// of a key's lease row) never lets a fence go back; losing a key's rows in
// both tables starts it again at 1, which is what the docs say.
func TestFenceSurvivesTruncate(t *testing.T) {
	_, admin := server(t)
	b := newBackend(t, admin, postgres.Options{})
	ctx := t.Context()
	last := fencing.Token(0)
	step := func(what string) {
		t.Helper()
		g := grab(t, b, "k", "owner-"+what)
		if g.Fence <= last {
			t.Fatalf("after %s: fence %d, want > %d", what, g.Fence, last)
		}
		last = g.Fence
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	step("first grant")
	step("second grant")
	for _, stmt := range []string{
		`TRUNCATE fencedlock_leases`,
		`TRUNCATE fencedlock_fences`,
		`DELETE FROM fencedlock_leases WHERE key = 'k'`,
		`TRUNCATE fencedlock_fences`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
		step(stmt)
	}
	if _, err := admin.Exec(ctx, `TRUNCATE fencedlock_leases, fencedlock_fences`); err != nil {
		t.Fatal(err)
	}
	if g := grab(t, b, "k", "after both"); g.Fence != 1 {
		t.Fatalf("after truncating both tables: fence %d; the docs say it starts again at 1", g.Fence)
	}
}

// TestRenewNeverRecreates is the openbao bug (#2097): a renewal after the
// lock was released, force-released or its row deleted must fail with
// ErrNotHeld and leave no lease on the server.
func TestRenewNeverRecreates(t *testing.T) {
	_, admin := server(t)
	b := newBackend(t, admin, postgres.Options{})
	ctx := t.Context()
	live := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM fencedlock_leases WHERE owner IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, end := range []struct {
		name string
		do   func(g driver.Grant) error
	}{
		{"Release", func(g driver.Grant) error { return b.Release(ctx, g) }},
		{"ForceRelease", func(g driver.Grant) error { _, err := b.ForceRelease(ctx, g.Key); return err }},
		{"DELETE", func(g driver.Grant) error {
			_, err := admin.Exec(ctx, `DELETE FROM fencedlock_leases WHERE key = $1`, []byte(g.Key))
			return err
		}},
		{"TRUNCATE", func(driver.Grant) error { _, err := admin.Exec(ctx, `TRUNCATE fencedlock_leases`); return err }},
	} {
		g := grab(t, b, "renewed-"+end.name, "owner")
		if err := end.do(g); err != nil {
			t.Fatalf("%s: %v", end.name, err)
		}
		if _, err := b.Renew(ctx, g, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Renew after %s: %v, want ErrNotHeld", end.name, err)
		}
		if n := live(); n != 0 {
			t.Fatalf("Renew after %s left %d live leases, want 0", end.name, n)
		}
	}
}

// TestCheckTxCommitsWithLease: the lock check, the fence check and the
// write commit together: a KV write in the transaction of a CheckTx that
// passed lands; a forced release before CheckTx fails it and nothing is
// written; and a take-over of an expired lease waits for the checked
// transaction to end, so it cannot be granted while the old holder's
// write is in flight.
func TestCheckTxCommitsWithLease(t *testing.T) {
	_, admin := server(t)
	b := newBackend(t, admin, postgres.Options{})
	kv := newKV(t, admin, "")
	ctx := t.Context()
	g := grab(t, b, "res", "a")
	holder := driver.HolderID(g.Owner)
	write := func(g driver.Grant, value string) error {
		return pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
			if err := b.CheckTx(ctx, tx, g.Key, g.Fence); err != nil {
				return err
			}
			return kv.In(tx).Set(ctx, "res", value, g.Fence, driver.HolderID(g.Owner))
		})
	}
	if err := write(g, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx, "res"); err != nil {
		t.Fatal(err)
	}
	if err := write(g, "two"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("write after ForceRelease: %v, want ErrNotHeld", err)
	}
	if r, _ := kv.Get(ctx, "res"); r.Value != "one" || r.Fence != g.Fence || r.Holder != holder {
		t.Fatalf("kv after the rejected write = %+v, want one with fence %d", r, g.Fence)
	}

	// A short lease, checked in a transaction that stays open past its
	// expiry: the next Acquire blocks until that transaction commits.
	g2, err := b.Acquire(ctx, driver.AcquireRequest{Key: "res", Owner: "b", TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := b.CheckTx(ctx, tx, "res", g2.Fence); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // past g2's lease
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "res", Owner: "c", TTL: time.Minute})
		got <- err
	}()
	time.Sleep(400 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Acquire returned (%v) while the old holder's checked transaction is open", err)
	default:
	}
	if err := kv.In(tx).Set(ctx, "res", "three", g2.Fence, driver.HolderID(g2.Owner)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the checked transaction committed: %v", err)
	}
}

// TestKVStore checks the fencing.Store rule on the KV table: greater token
// accepted, equal token from the same holder accepted, from another holder
// and older rejected with a StaleError that changes nothing, and Update's
// read-modify-write.
func TestKVStore(t *testing.T) {
	_, admin := server(t)
	ctx := t.Context()
	kv := newKV(t, admin, "app kv")
	if r, err := kv.Get(ctx, "x"); err != nil || r.Found || r.Fence != 0 {
		t.Fatalf("Get of a new key = %+v, %v", r, err)
	}
	if err := kv.Set(ctx, "x", "a", 0, "h"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("zero token: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kv.Set(ctx, "x", "a", 5, "h1"))
	must(kv.Set(ctx, "x", "b", 5, "h1"))
	var se *fencing.StaleError
	if err := kv.Set(ctx, "x", "c", 5, "h2"); !errors.As(err, &se) || se.Accepted != 5 || se.AcceptedFrom != "h1" {
		t.Fatalf("equal token from another holder: %v", err)
	}
	if err := kv.Set(ctx, "x", "c", 4, "h1"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("older token: %v", err)
	}
	must(kv.Update(ctx, "x", 6, "h3", func(cur fencing.Record) (string, error) { return cur.Value + "+", nil }))
	if err := kv.Update(ctx, "x", 5, "h1", func(fencing.Record) (string, error) {
		t.Fatal("fn called for a stale token")
		return "", nil
	}); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Update with an older token: %v", err)
	}
	must(kv.Update(ctx, "new", 1, "h", func(cur fencing.Record) (string, error) { return "v", nil }))
	if r, _ := kv.Get(ctx, "x"); r.Value != "b+" || r.Fence != 6 || r.Holder != "h3" {
		t.Fatalf("Get = %+v, want b+ at 6 from h3", r)
	}
}

// TestSchema: the tables are created on first use under quoted,
// schema-qualified names; with SkipCreate a missing table is a permanent
// error; and the embedded schema file is what a DBA applies.
func TestSchema(t *testing.T) {
	_, admin := server(t)
	ctx := t.Context()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA app`); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, admin, postgres.Options{LeaseTable: `app.Lock "Table"`, FenceTable: "app.user"})
	g := grab(t, b, "k", "o")
	var n int
	if err := admin.QueryRow(ctx, `SELECT fence FROM app."Lock ""Table""" WHERE key = 'k'`).Scan(&n); err != nil || n != int(g.Fence) {
		t.Fatalf("lease row: %d, %v", n, err)
	}
	if _, err := postgres.New(ctx, admin, postgres.Options{LeaseTable: "a.b.c"}); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("a.b.c: %v", err)
	}
	missing := newBackend(t, admin, postgres.Options{LeaseTable: "missing", FenceTable: "missing_f", SkipCreate: true})
	if _, err := missing.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second}); !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Acquire on a missing table: %v, want ErrPermanent", err)
	}
	ddl, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, string(ddl)); err != nil {
		t.Fatalf("schema.sql as a DBA applies it: %v", err)
	}
	dba := newBackend(t, admin, postgres.Options{SkipCreate: true})
	grab(t, dba, "k", "o")
	var version string
	if err := admin.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s", version)
	if !strings.Contains(string(ddl), "CREATE TABLE IF NOT EXISTS") {
		t.Fatal("schema.sql must be idempotent")
	}
}
