// Package postgres is a fencedlock backend on PostgreSQL (13 or later),
// through github.com/jackc/pgx/v5's pgxpool: fenced locks for services
// whose only shared store is their database.
//
// Locks are rows of a lease table (schema.sql, embedded: the same SQL a
// DBA can apply), never session-level advisory locks: acquire, renew and
// release are one statement each and a forced release one short
// transaction, so a lock does not vanish with a connection and the backend
// works behind PgBouncer in transaction pooling mode. Expiry is judged by
// the server's clock only (now() and clock_timestamp() in the statements;
// the client's clock is never sent).
//
// Fences: every grant's fence is one more than the greatest fence of the
// key's row in the lease table and of its row in the fence table, and both
// rows are written in the grant's statement; the backend never deletes
// either. So a TRUNCATE or DELETE of the lease table keeps fences going up
// (the fence table has them), and so does one of the fence table (the
// lease rows have them, and the next grant writes the fence row back); a
// key whose rows are gone from both tables starts again at 1.
//
// A renewal is an UPDATE of a live row owned by the caller, never an
// upsert: it cannot bring back a released, forced or deleted lock.
//
// Waiters: [New] returns a backend that lets the Locker poll with its
// capped exponential backoff, which works through any pooler; the safe
// default, because LISTEN behind a transaction pooler silently receives
// nothing. [NewListening] adds LISTEN/NOTIFY wake-ups on a dedicated
// connection (use it when the pool connects to PostgreSQL directly, or
// give it a direct connection string).
//
// The fence at the resource: [Backend.CheckTx] checks, in the caller's own
// transaction, that a lease is still held with its fence and keeps it so
// until the transaction ends, and [KV] is a [fencing.Store] on a table of
// the same database whose writes can join that transaction.
package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed" // the schema files
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

//go:embed schema.sql
var schemaSQL string

// Default names of [Options].
const (
	DefaultLeaseTable = "fencedlock_leases"
	DefaultFenceTable = "fencedlock_fences"
	DefaultChannel    = "fencedlock"
	DefaultWaitTable  = "fencedlock_waiters"
)

// Options configure a [Backend]. The zero value uses the default tables in
// the connection's search_path and creates them on first use.
type Options struct {
	// LeaseTable and FenceTable name the two tables ("name" or
	// "schema.name"; quoted, so exact and case-sensitive). Empty means
	// DefaultLeaseTable and DefaultFenceTable. Every backend sharing locks
	// must use the same names.
	LeaseTable, FenceTable string
	// Channel is the NOTIFY channel announcing releases. Empty means
	// DefaultChannel. Backends on other tables may share it (a
	// notification for another key only wakes a waiter early).
	Channel string
	// WaitTable names the waiters' queue of [NewFair]; empty means
	// DefaultWaitTable.
	WaitTable string
	// SkipCreate disables the CREATE TABLE IF NOT EXISTS of New and
	// NewFair: the tables must exist (applied from schema.sql and
	// fair.sql by a migration).
	SkipCreate bool
}

// Backend is a [driver.Backend], [driver.Inspector] and
// [driver.ForceReleaser] on a pgxpool. Its methods are safe for concurrent
// use.
type Backend struct {
	pool    *pgxpool.Pool
	leases  string // quoted
	fences  string // quoted
	channel string
	opts    Options

	acquireSQL, renewSQL, releaseSQL, inspectSQL string

	mu       sync.Mutex
	closed   bool
	inflight map[string]chan struct{} // Acquires settling after their caller's context ended (settled)
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Inspector     = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
)

// ident quotes a table name, "name" or "schema.name", or returns an error
// wrapping [driver.ErrInvalid].
func ident(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("postgres: table name %q has more than one dot (schema.table): %w", name, driver.ErrInvalid)
	}
	for _, p := range parts {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return "", fmt.Errorf("postgres: table name %q has an empty part or a NUL byte: %w", name, driver.ErrInvalid)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// New returns a backend on pool, which it does not own (Close leaves it
// open). Unless opts.SkipCreate is set it creates the tables if they do
// not exist (schema.sql). Waiters poll: see [NewListening] for wake-ups.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Backend, error) {
	leases, err := ident(orDefault(opts.LeaseTable, DefaultLeaseTable))
	if err != nil {
		return nil, err
	}
	fences, err := ident(orDefault(opts.FenceTable, DefaultFenceTable))
	if err != nil {
		return nil, err
	}
	b := &Backend{pool: pool, leases: leases, fences: fences, channel: orDefault(opts.Channel, DefaultChannel), opts: opts}
	if !opts.SkipCreate {
		ddl := strings.NewReplacer(`"`+DefaultLeaseTable+`"`, leases, `"`+DefaultFenceTable+`"`, fences).Replace(schemaSQL)
		if err := createTables(ctx, pool, ddl); err != nil {
			return nil, err
		}
		if err := addWakeColumn(ctx, pool, leases); err != nil {
			return nil, err
		}
	}
	b.prepare()
	return b, nil
}

// createTables runs ddl (CREATE TABLE IF NOT EXISTS statements). Two
// processes creating the same table at once may see a unique violation on
// the catalog: the table then exists, so it runs ddl once more to check.
func createTables(ctx context.Context, pool *pgxpool.Pool, ddl string) error {
	_, err := pool.Exec(ctx, ddl)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07") {
		_, err = pool.Exec(ctx, ddl)
	}
	if err != nil {
		return fmt.Errorf("postgres: creating the tables: %w", err)
	}
	return nil
}

// prepare writes the statements of the hot path once.
func (b *Backend) prepare() {
	// Acquire: one statement (acquireStatement).
	b.acquireSQL = b.acquireStatement("", "", "")
	// Renew: an UPDATE of the caller's live row, never an upsert.
	b.renewSQL = fmt.Sprintf(`UPDATE %s SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
	WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()`, b.leases)
	// Release: frees the caller's live row, keeping it and its fence,
	// and announces the release in the same statement if a listening
	// waiter marked the row (wake.go).
	b.releaseSQL = fmt.Sprintf(`WITH r AS (
	UPDATE %s SET owner = NULL, expires_at = NULL
	WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING %s AS wake)
SELECT 1 FROM r %s`, b.leases, wakeLive, notifyIfWake)
	b.inspectSQL = fmt.Sprintf(`SELECT greatest(coalesce(l.fence, 0), coalesce(f.fence, 0)),
	coalesce(l.owner IS NOT NULL AND l.expires_at > clock_timestamp(), false), l.owner,
	coalesce(greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0), 0)::float8
FROM (SELECT $1::bytea AS key) k
LEFT JOIN %s l ON l.key = k.key
LEFT JOIN %s f ON f.key = k.key`, b.leases, b.fences)
}

// acquireStatement is the acquire statement: the lease row is inserted,
// or updated if free or expired (by the statement's now(): a lease is
// taken only once expired at the server's time), with a fence above both
// rows' fences: l.fence is the locked, latest row version, EXCLUDED.fence
// the fence row's value plus one. The fence row is written in the same
// statement. When the key is held, the holder's remaining lease comes
// back in the same round trip for the HeldError hint. Parameters: $1 key,
// $2 owner hash, $3 TTL in microseconds. The fair variant (fair.go) adds
// CTEs before (pre) and after (post) the grant, and a condition (cond,
// "AND ...") on taking the key.
func (b *Backend) acquireStatement(pre, cond, post string) string {
	return fmt.Sprintf(`
WITH %[3]s f AS (SELECT coalesce((SELECT fence FROM %[2]s WHERE key = $1), 0) AS fence),
taken AS (
	INSERT INTO %[1]s AS l (key, owner, fence, expires_at)
	SELECT $1, $2, f.fence + 1, clock_timestamp() + $3 * interval '1 microsecond' FROM f WHERE true %[4]s
	ON CONFLICT (key) DO UPDATE
		SET owner = EXCLUDED.owner, fence = greatest(l.fence + 1, EXCLUDED.fence),
			expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE l.owner IS NULL OR l.expires_at <= now()
	RETURNING l.fence
),
kept AS (
	INSERT INTO %[2]s AS c (key, fence) SELECT $1, fence FROM taken
	ON CONFLICT (key) DO UPDATE SET fence = greatest(c.fence, EXCLUDED.fence)
)%[5]s
SELECT fence, 0::float8 FROM taken
UNION ALL
SELECT 0, greatest(extract(epoch FROM expires_at - clock_timestamp()), 0)::float8
	FROM %[1]s WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM taken)`, b.leases, b.fences, pre, cond, post)
}

// ownerHash is what the table stores of an owner token.
func ownerHash(owner string) []byte {
	h := sha256.Sum256([]byte(owner))
	return h[:]
}

// holderOf derives the holder id (driver.HolderID) from a stored hash.
func holderOf(hash []byte) string {
	if len(hash) < 8 {
		return ""
	}
	return hex.EncodeToString(hash[:8])
}

// payload is a release notification's payload for key: short whatever the
// key's length (a payload is limited to 8000 bytes).
func payload(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

func (b *Backend) usable(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("postgres: %w", driver.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// wrap reports err as the backend's, permanent when no retry can fix it
// (missing table or permission, failed authentication, a CHECK violated).
func wrap(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "28", "42", "23": // auth, syntax/undefined/privilege, integrity
			return fmt.Errorf("postgres: %s: %w: %w", what, driver.ErrPermanent, err)
		}
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// Acquire implements [driver.Backend]: one statement.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.grant(ctx, req, b.acquireSQL)
}

// grant runs q, an acquire statement (acquireStatement), with $1 to $3
// from req and more after them, and reads its outcome.
func (b *Backend) grant(ctx context.Context, req driver.AcquireRequest, q string, more ...any) (driver.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	sent := time.Now()
	var (
		fence int64
		left  float64 // seconds
	)
	args := append([]any{[]byte(req.Key), ownerHash(req.Owner), req.TTL.Microseconds()}, more...)
	err := b.settled(ctx, req.Key, req.Owner, func(qctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(qctx, q, args...).Scan(&fence, &left)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The row was created by a transaction our snapshot does not
		// see (held, for an unknown time), or, for Fair, the key is free
		// with waiters ahead.
		return driver.Grant{}, &driver.HeldError{Key: req.Key}
	case err != nil:
		return driver.Grant{}, wrap("acquire", err)
	case fence == 0:
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: time.Duration(left * float64(time.Second))}
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(fence), TTL: req.TTL, Sent: sent}, nil
}

// Renew implements [driver.Backend]: one UPDATE of a live row owned by
// g.Owner. It never creates a row.
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.usable(ctx); err != nil {
		return 0, err
	}
	tag, err := b.pool.Exec(ctx, b.renewSQL, []byte(g.Key), ownerHash(g.Owner), ttl.Microseconds())
	if err != nil {
		return 0, wrap("renew", err)
	}
	if tag.RowsAffected() != 1 {
		return 0, fmt.Errorf("postgres: renew %q: %w", g.Key, driver.ErrNotHeld)
	}
	return ttl, nil
}

// Release implements [driver.Backend]: one statement that frees g.Key if
// g.Owner holds it (the row and its fence stay) and notifies waiters.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	if err := b.awaitSettled(ctx, g.Key, g.Owner); err != nil {
		return err
	}
	var one int
	err := b.pool.QueryRow(ctx, b.releaseSQL, []byte(g.Key), ownerHash(g.Owner), b.channel, payload(g.Key)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: release %q: %w", g.Key, driver.ErrNotHeld)
	}
	if err != nil {
		return wrap("release", err)
	}
	return nil
}

// Inspect implements [driver.Inspector]. Info.Fence of a free key is the
// last fence granted.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Info{}, err
	}
	var (
		info  driver.Info
		fence int64
		hash  []byte
		left  float64
	)
	if err := b.pool.QueryRow(ctx, b.inspectSQL, []byte(key)).Scan(&fence, &info.Held, &hash, &left); err != nil {
		return driver.Info{}, wrap("inspect", err)
	}
	info.Fence = fencing.Token(fence)
	if info.Held {
		info.TTL = time.Duration(left * float64(time.Second))
		info.Holder = holderOf(hash)
	}
	return info, nil
}

// ForceRelease implements [driver.ForceReleaser] in one short
// transaction: it locks the key's lease row (creating a free one if
// missing), frees it with a fence one above both rows', writes that fence
// to the fence row and notifies waiters.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	if err := b.usable(ctx); err != nil {
		return driver.ForceResult{}, err
	}
	var r driver.ForceResult
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		k := []byte(key)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (key, owner, fence, expires_at) VALUES ($1, NULL, 0, NULL)
			ON CONFLICT (key) DO NOTHING`, b.leases), k); err != nil {
			return err
		}
		var (
			lfence, ffence int64
			hash           []byte
		)
		err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT l.fence, l.owner, l.owner IS NOT NULL AND l.expires_at > clock_timestamp(),
			coalesce((SELECT fence FROM %s WHERE key = $1), 0)
			FROM %s l WHERE l.key = $1 FOR UPDATE OF l`, b.fences, b.leases), k).Scan(&lfence, &hash, &r.Held, &ffence)
		if err != nil {
			return err
		}
		r.Before = fencing.Token(max(lfence, ffence))
		if r.Held {
			r.Before = fencing.Token(lfence)
			r.Holder = holderOf(hash)
		}
		after := max(lfence, ffence) + 1
		r.After = fencing.Token(after)
		_, err = tx.Exec(ctx, fmt.Sprintf(`
WITH l AS (UPDATE %s SET owner = NULL, expires_at = NULL, fence = $2 WHERE key = $1),
f AS (INSERT INTO %s AS c (key, fence) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET fence = greatest(c.fence, EXCLUDED.fence))
SELECT pg_notify($3, $4)`, b.leases, b.fences), k, after, b.channel, payload(key))
		return err
	})
	if err != nil {
		return driver.ForceResult{}, wrap("force release", err)
	}
	return r, nil
}

// CheckTx checks, in the caller's transaction tx, that the lease of key
// with fence token is still held, and keeps it held until tx ends: it
// takes a share lock on the key's lease row, so no release, expiry
// take-over or forced release of the lease can commit before tx does (a
// renewal waits too: keep tx short). Writes the caller then makes in tx
// commit only if the lease was held when they were made. Pass the lease's
// Fence; tx must be on the same database as the lock tables.
//
// It returns an error wrapping [driver.ErrNotHeld] if the lease is no
// longer held with that fence; the caller should roll tx back.
func (b *Backend) CheckTx(ctx context.Context, tx pgx.Tx, key string, token fencing.Token) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("postgres: zero token: %w", fencing.ErrInvalidToken)
	}
	var held bool
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT owner IS NOT NULL AND expires_at > clock_timestamp() AND fence = $2
		FROM %s WHERE key = $1 FOR SHARE`, b.leases), []byte(key), int64(token)).Scan(&held)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return wrap("check lease", err)
	}
	if !held {
		return fmt.Errorf("postgres: lease of %q with fence %d: %w", key, token, driver.ErrNotHeld)
	}
	return nil
}

// Close marks the backend closed; calls after it fail with
// [driver.ErrClosed]. It does not close the pool. It is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}
