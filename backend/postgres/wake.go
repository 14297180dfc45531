package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Release notifications are sent only to keys a listening waiter marked.
// A transaction that NOTIFYs takes a cluster-wide lock from its pre-commit
// until after its commit (PreCommit_Notify, so that notifications queue in
// commit order): releases that all NOTIFY commit one at a time, which
// halved throughput at 64 concurrent lockers although nobody listened. So
// a waiter that LISTENs sets its key's wake_until a little ahead of now
// when its watch begins, before its next attempt, and keeps it ahead while
// it watches; a release (or a fair waiter leaving) NOTIFYs only while
// wake_until is in the future. A polling waiter (New, or behind a
// transaction pooler) marks nothing and costs releases nothing.
//
// No wake-up is lost: the mark commits before the watcher's next attempt,
// so any release after that attempt found the key held reads it. A mark
// that fails (a transient error) only leaves that waiter to its timers
// (the holder's remaining lease, MaxRetryDelay), as a lost notification
// would; a forced release always NOTIFYs.
const (
	// wakeAhead is how far ahead of now a watcher sets wake_until.
	wakeAhead = 3 * time.Second
	// wakeRefresh is how often a watcher moves it ahead again: at most a
	// third of wakeAhead, so a loaded machine's late refresh still lands
	// before the mark runs out.
	wakeRefresh = time.Second
)

// wakeLive is the SQL condition, on a lease row, that a watcher is live.
const wakeLive = `coalesce(wake_until > clock_timestamp(), false)`

// notifyIfWake follows "FROM r" (rows with a boolean column wake) in a
// release: it NOTIFYs $3 with payload $4 only if a released row's wake is
// true, and keeps every row of r either way.
const notifyIfWake = `LEFT JOIN LATERAL (SELECT pg_notify($3, $4) WHERE r.wake) AS n ON true`

// markSQL sets the key's wake_until ahead, writing only when the mark
// would run out within wakeAhead-wakeRefresh; a key with no row is free
// (the watcher's next attempt takes it) and needs no mark.
func (b *Backend) markSQL() string {
	return fmt.Sprintf(`UPDATE %s SET wake_until = clock_timestamp() + $2 * interval '1 microsecond'
	WHERE key = $1 AND (wake_until IS NULL OR wake_until < clock_timestamp() + $3 * interval '1 microsecond')`, b.leases)
}

// markWake sets key's wake_until ahead (see markSQL).
func (b *Backend) markWake(ctx context.Context, key string) error {
	_, err := b.pool.Exec(ctx, b.markSQL(), []byte(key), wakeAhead.Microseconds(), (wakeAhead - wakeRefresh).Microseconds())
	if err != nil {
		return wrap("mark the key watched", err)
	}
	return nil
}

// keepMarked marks key at once, then every wakeRefresh until stop is
// closed or ctx ends. It returns after the first mark (its error, if any;
// the refreshes go on regardless).
func (b *Backend) keepMarked(ctx context.Context, key string, stop <-chan struct{}) error {
	err := b.markWake(ctx, key)
	go func() {
		t := time.NewTicker(wakeRefresh)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				mctx, cancel := context.WithTimeout(ctx, wakeRefresh)
				_ = b.markWake(mctx, key) // a failed refresh: see the comment at the top
				cancel()
			}
		}
	}()
	return err
}

// addWakeColumn adds wake_until to a lease table created before it
// existed. It reads the catalog first: an ALTER TABLE takes an exclusive
// lock on the table even when the column exists.
func addWakeColumn(ctx context.Context, pool *pgxpool.Pool, leases string) error {
	var has bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'wake_until' AND NOT attisdropped)`, leases).Scan(&has)
	if err == nil && !has {
		_, err = pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS wake_until timestamptz`, leases))
	}
	if err != nil {
		return fmt.Errorf("postgres: adding wake_until to %s: %w", leases, err)
	}
	return nil
}
