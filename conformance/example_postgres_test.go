package conformance_test

// A complete fencedlock backend that is not one of ours: locks in a plain
// PostgreSQL table through database/sql, checked by the conformance suite
// against a real server that the test starts. It is the worked example of
// conformance/GUIDE.md.
//
// One row per key, never deleted:
//
//	key        bytea PRIMARY KEY  -- any bytes: a text column would refuse NUL and invalid UTF-8
//	owner_hash bytea              -- SHA-256 of the owner token, NULL while free
//	fence      bigint NOT NULL    -- the last fence granted; only ever incremented
//	expires_at timestamptz        -- server time; the lease ends then
//
// Every decision uses the server's clock (now()), never the client's.
// Acquire is one INSERT ... ON CONFLICT DO UPDATE ... WHERE the lock is free
// or expired, which increments the fence in the same statement; renew and
// release are UPDATEs whose WHERE clause checks the owner and the expiry.
// Release keeps the row (and so the fence): the next holder gets a greater
// fence. The table holds only hashes of owner tokens, so reading it does not
// let anyone renew or release another's lock.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// pgBackend is a driver.Backend (and Inspector) on one table.
type pgBackend struct {
	db    *sql.DB
	table string // a quoted identifier

	mu       sync.Mutex
	closed   bool
	inflight map[string]chan struct{} // Acquires cut by their context and still running (inflightKey)
}

// settleTimeout bounds an Acquire's statement once its caller's context
// ended: it runs on, on a context of its own, so that the owner's Release
// can wait for its outcome (see Acquire).
const settleTimeout = 2 * time.Second

func inflightKey(key, owner string) string { return key + "\x00" + owner }

var (
	_ driver.Backend   = (*pgBackend)(nil)
	_ driver.Inspector = (*pgBackend)(nil)
)

// openPG opens a backend on table with its own connection pool, as a
// separate process would. The table must exist (see pgSchema).
func openPG(dsn, table string) (*pgBackend, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("pgexample: %w", err)
	}
	db.SetMaxOpenConns(8)
	return &pgBackend{db: db, table: pgx.Identifier{table}.Sanitize()}, nil
}

// pgSchema is the DDL of a lock table.
func pgSchema(table string) string {
	return fmt.Sprintf(`CREATE TABLE %s (
		key        bytea PRIMARY KEY,
		owner_hash bytea,
		fence      bigint NOT NULL,
		expires_at timestamptz
	)`, pgx.Identifier{table}.Sanitize())
}

func ownerHash(owner string) []byte {
	h := sha256.Sum256([]byte(owner))
	return h[:]
}

func (b *pgBackend) usable() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("pgexample: %w", driver.ErrClosed)
	}
	return nil
}

// Acquire takes the key if its row is absent, free or expired, and
// increments the fence in the same statement. When the key is held, the
// same round trip reads the holder's remaining lease for the HeldError.
func (b *pgBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.usable(); err != nil {
		return driver.Grant{}, err
	}
	q := fmt.Sprintf(`
		WITH taken AS (
			INSERT INTO %[1]s AS l (key, owner_hash, fence, expires_at)
			VALUES ($1, $2, 1, now() + $3 * interval '1 microsecond')
			ON CONFLICT (key) DO UPDATE
				SET owner_hash = EXCLUDED.owner_hash, fence = l.fence + 1, expires_at = EXCLUDED.expires_at
				WHERE l.owner_hash IS NULL OR l.expires_at <= now()
			RETURNING fence
		)
		SELECT fence, 0::float8 FROM taken
		UNION ALL
		SELECT 0, greatest(extract(epoch FROM expires_at - now()), 0)::float8
			FROM %[1]s WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM taken)`, b.table)
	fence, left, err := b.settled(ctx, req, q)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Another transaction created the row concurrently; we did not see
		// it in our snapshot, so its lease is unknown.
		return driver.Grant{}, &driver.HeldError{Key: req.Key}
	case err != nil:
		return driver.Grant{}, fmt.Errorf("pgexample: acquire: %w", err)
	case fence == 0:
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: time.Duration(left * float64(time.Second))}
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(fence), TTL: req.TTL}, nil
}

// settled runs Acquire's statement q on a context that ctx does not cancel
// and returns its reply, or ctx's error as soon as ctx ends. The statement
// may then still run and commit: the Locker's clean-up, a Release of the
// key by the same owner, must not run before it, or the late grant holds
// the key for its whole TTL. So the cut statement is recorded in
// b.inflight until it ends, and Release waits for it (awaitSettled).
func (b *pgBackend) settled(ctx context.Context, req driver.AcquireRequest, q string) (fence int64, left float64, err error) {
	type reply struct {
		fence int64
		left  float64 // seconds
		err   error
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	done := make(chan reply, 1)
	go func() {
		var r reply
		r.err = b.db.QueryRowContext(qctx, q, []byte(req.Key), ownerHash(req.Owner), req.TTL.Microseconds()).Scan(&r.fence, &r.left)
		done <- r
	}()
	select {
	case r := <-done:
		cancel()
		return r.fence, r.left, r.err
	case <-ctx.Done():
	}
	k, ch := inflightKey(req.Key, req.Owner), make(chan struct{})
	b.mu.Lock()
	if b.inflight == nil {
		b.inflight = map[string]chan struct{}{}
	}
	b.inflight[k] = ch
	b.mu.Unlock()
	go func() {
		<-done // its outcome is for no one: the Release that follows waits for it
		cancel()
		b.mu.Lock()
		if b.inflight[k] == ch {
			delete(b.inflight, k)
		}
		b.mu.Unlock()
		close(ch)
	}()
	return 0, 0, ctx.Err()
}

// awaitSettled waits until no Acquire of key by owner cut by its context
// is still running on this backend, or ctx is done.
func (b *pgBackend) awaitSettled(ctx context.Context, key, owner string) error {
	b.mu.Lock()
	ch := b.inflight[inflightKey(key, owner)]
	b.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgexample: release %q: an Acquire of it is still running: %w", key, ctx.Err())
	}
}

// Renew moves the expiry if, and only if, g's owner holds the key.
func (b *pgBackend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.usable(); err != nil {
		return 0, err
	}
	q := fmt.Sprintf(`UPDATE %s SET expires_at = now() + $3 * interval '1 microsecond'
		WHERE key = $1 AND owner_hash = $2 AND expires_at > now()`, b.table)
	res, err := b.db.ExecContext(ctx, q, []byte(g.Key), ownerHash(g.Owner), ttl.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("pgexample: renew: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, fmt.Errorf("pgexample: renew %q: %w", g.Key, driver.ErrNotHeld)
	}
	return ttl, nil
}

// Release frees the key if, and only if, g's owner holds it. The row and
// its fence stay.
func (b *pgBackend) Release(ctx context.Context, g driver.Grant) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := b.awaitSettled(ctx, g.Key, g.Owner); err != nil {
		return err
	}
	q := fmt.Sprintf(`UPDATE %s SET owner_hash = NULL, expires_at = NULL
		WHERE key = $1 AND owner_hash = $2 AND expires_at > now()`, b.table)
	res, err := b.db.ExecContext(ctx, q, []byte(g.Key), ownerHash(g.Owner))
	if err != nil {
		return fmt.Errorf("pgexample: release: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("pgexample: release %q: %w", g.Key, driver.ErrNotHeld)
	}
	return nil
}

// Inspect reads the key's row. The holder id is derived from the stored
// hash, which is all the table knows of the owner.
func (b *pgBackend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.usable(); err != nil {
		return driver.Info{}, err
	}
	q := fmt.Sprintf(`SELECT fence, owner_hash IS NOT NULL AND expires_at > now(), owner_hash,
		coalesce(greatest(extract(epoch FROM expires_at - now()), 0), 0)::float8
		FROM %s WHERE key = $1`, b.table)
	var (
		info driver.Info
		hash []byte
		left float64
	)
	err := b.db.QueryRowContext(ctx, q, []byte(key)).Scan(&info.Fence, &info.Held, &hash, &left)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Info{}, nil
	}
	if err != nil {
		return driver.Info{}, fmt.Errorf("pgexample: inspect: %w", err)
	}
	if info.Held {
		info.TTL = time.Duration(left * float64(time.Second))
		info.Holder = hex.EncodeToString(hash[:8]) // = driver.HolderID(owner)
	}
	return info, nil
}

// Close closes the backend's own connection pool. It is idempotent.
func (b *pgBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.db.Close()
}

// pgHarness gives the suite one fresh table per property, on one server.
type pgHarness struct {
	admin *sql.DB
	dsn   string
	table string
}

func (h *pgHarness) NewBackend(context.Context) (driver.Backend, error) {
	return openPG(h.dsn, h.table)
}

// Invalidate frees the key as an operator would, keeping its fence.
func (h *pgHarness) Invalidate(ctx context.Context, key string) error {
	_, err := h.admin.ExecContext(ctx, fmt.Sprintf(
		`UPDATE %s SET owner_hash = NULL, expires_at = NULL WHERE key = $1`, pgx.Identifier{h.table}.Sanitize()), []byte(key))
	return err
}

// Expire ends the key's lease now, as if its TTL had passed.
func (h *pgHarness) Expire(ctx context.Context, key string) error {
	_, err := h.admin.ExecContext(ctx, fmt.Sprintf(
		`UPDATE %s SET expires_at = now() WHERE key = $1 AND owner_hash IS NOT NULL`, pgx.Identifier{h.table}.Sanitize()), []byte(key))
	return err
}

// Config: the server's clock is the local one; expiry is exact (checked in
// every statement), so the defaults fit.
func (h *pgHarness) Config() conformance.Config { return conformance.Config{} }

// NewGuard returns a guarded row in a table of its own: the write and the
// fencing check are one UPDATE.
func (h *pgHarness) NewGuard(ctx context.Context) (conformance.Guard, error) {
	table := h.table + "_guard"
	_, err := h.admin.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (
		id int PRIMARY KEY, fence bigint NOT NULL, holder text NOT NULL, value text NOT NULL)`, pgx.Identifier{table}.Sanitize()))
	if err != nil {
		return nil, err
	}
	_, err = h.admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1, 0, '', '')`, pgx.Identifier{table}.Sanitize()))
	if err != nil {
		return nil, err
	}
	return &pgGuard{db: h.admin, table: pgx.Identifier{table}.Sanitize()}, nil
}

// pgGuard applies the fencing rule in the UPDATE that writes the value.
type pgGuard struct {
	db    *sql.DB
	table string
}

func (g *pgGuard) Write(ctx context.Context, token fencing.Token, holder, value string) error {
	if token == 0 {
		return fmt.Errorf("pgexample: zero token: %w", fencing.ErrInvalidToken)
	}
	res, err := g.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET fence = $1, holder = $2, value = $3
		WHERE id = 1 AND (fence < $1 OR (fence = $1 AND holder = $2))`, g.table), int64(token), holder, value)
	if err != nil {
		return fmt.Errorf("pgexample: guarded write: %w", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	se := &fencing.StaleError{Token: token, Holder: holder}
	var accepted int64
	if err := g.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT fence, holder FROM %s WHERE id = 1`, g.table)).Scan(&accepted, &se.AcceptedFrom); err != nil {
		return fmt.Errorf("pgexample: guarded write rejected, and reading the accepted fence failed: %w: %w", fencing.ErrStale, err)
	}
	se.Accepted = fencing.Token(accepted)
	return se
}

func (g *pgGuard) Read(ctx context.Context) (string, error) {
	var v string
	err := g.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT value FROM %s WHERE id = 1`, g.table)).Scan(&v)
	return v, err
}

// TestPostgresExample runs the conformance suite on the example backend
// against a real PostgreSQL server started for the test.
func TestPostgresExample(t *testing.T) {
	srv := testserver.StartPostgres(t)
	admin, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	n := 0
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		n++
		table := fmt.Sprintf("locks_%d", n)
		if _, err := admin.ExecContext(t.Context(), pgSchema(table)); err != nil {
			t.Fatalf("create table: %v\nserver log:\n%s", err, srv.Log())
		}
		return &pgHarness{admin: admin, dsn: srv.DSN(), table: table}
	})
}
