package postgres

import (
	"context"
	_ "embed" // the queue's schema file
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

//go:embed fair.sql
var fairSQL string

// Fair is a [Backend] whose waiters queue on the server (fair.sql) and
// are granted the lock in the order they arrived: it implements
// [driver.WaitAcquirer], so [fencedlock.Locker.Acquire] waits through
// [Fair.AcquireWait]. Every attempt is still one statement: it takes the
// lock only if it is free and no live waiter arrived earlier, and
// otherwise joins the queue (or refreshes its place) in the same
// statement. So FIFO costs no round trip more per attempt than [New]'s
// polling; a waiter that gives up costs one statement more (leaving the
// queue). Its Acquire does not queue, and takes nothing while waiters are
// queued.
//
// Without notifier, waiters poll: the head of the queue learns of a
// release at its next attempt, at most fairMaxPoll (100 ms) later (one
// statement per waiter per poll: the price of no notifications behind a
// transaction pooler). With notifier (a [Listening] on a direct
// connection) a release wakes them at once and they otherwise attempt
// again when the holder's lease ends or their queue entry needs its
// refresh (a third of max(TTL, 2 s)).
type Fair struct {
	*Backend
	notifier driver.Notifier

	attemptSQL, leaveSQL string
}

var _ driver.WaitAcquirer = (*Fair)(nil)

// fairMinEntryTTL is the shortest life of a waiter's queue row: a waiter
// keeps its place through a stall up to this long (less its refresh
// interval) even with a short lease, and a crashed waiter holds up the
// others as long.
const fairMinEntryTTL = 2 * time.Second

// NewFair returns a Fair on b's pool and tables, creating the queue table
// (fair.sql, named by Options.WaitTable) unless b's Options.SkipCreate is
// set. notifier, if not nil, wakes waiters on release: pass the
// [Listening] whose Backend b is, and close that Listening (Fair's Close
// is b's, which leaves the listener open).
func NewFair(ctx context.Context, b *Backend, notifier driver.Notifier) (*Fair, error) {
	waiters, err := ident(orDefault(b.opts.WaitTable, DefaultWaitTable))
	if err != nil {
		return nil, err
	}
	if !b.opts.SkipCreate {
		if err := createTables(ctx, b.pool, strings.ReplaceAll(fairSQL, `"`+DefaultWaitTable+`"`, waiters)); err != nil {
			return nil, err
		}
	}
	f := &Fair{Backend: b, notifier: notifier}
	// $4 is the queue row's life in microseconds, $5 whether to join.
	f.attemptSQL = b.acquireStatement(fmt.Sprintf(`
me AS (SELECT seq FROM %[1]s WHERE key = $1 AND owner = $2),
ahead AS (SELECT 1 FROM %[1]s w WHERE w.key = $1 AND w.owner <> $2 AND w.expires_at > clock_timestamp()
	AND w.seq < coalesce((SELECT seq FROM me), 9223372036854775807) LIMIT 1),`, waiters),
		`AND NOT EXISTS (SELECT 1 FROM ahead)`,
		fmt.Sprintf(`,
gone AS (DELETE FROM %[1]s WHERE key = $1 AND owner = $2 AND EXISTS (SELECT 1 FROM taken)),
joined AS (
	INSERT INTO %[1]s (key, owner, expires_at)
	SELECT $1, $2, clock_timestamp() + $4 * interval '1 microsecond' WHERE $5::boolean AND NOT EXISTS (SELECT 1 FROM taken)
	ON CONFLICT (key, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
),
purged AS (DELETE FROM %[1]s WHERE key = $1 AND owner <> $2 AND expires_at < clock_timestamp() - interval '1 minute')`, waiters))
	f.leaveSQL = fmt.Sprintf(`WITH q AS (DELETE FROM %[1]s WHERE key = $1 AND owner = $2),
r AS (UPDATE %[2]s SET owner = NULL, expires_at = NULL WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING %[3]s AS wake)
SELECT count(*) FROM r %[4]s`, waiters, b.leases, wakeLive, notifyIfWake)
	return f, nil
}

// Acquire makes one attempt to take req.Key, as [Backend.Acquire] does,
// except that while live waiters are queued it takes nothing, even if the
// lock is free: it returns a *[driver.HeldError] and the caller queues
// behind them ([Fair.AcquireWait]). One statement.
func (f *Fair) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return f.attempt(ctx, req, false)
}

func (f *Fair) attempt(ctx context.Context, req driver.AcquireRequest, join bool) (driver.Grant, error) {
	entry := max(req.TTL, fairMinEntryTTL)
	return f.grant(ctx, req, f.attemptSQL, entry.Microseconds(), join)
}

// Backoff of AcquireWait's attempts while the key is free but an earlier
// waiter has not taken it yet, and after a transient error.
const (
	fairMinBackoff = 10 * time.Millisecond
	fairMaxBackoff = time.Second
)

// fairMaxPoll bounds the wait between a polling waiter's attempts while
// the key is held (no notifier): a hand-off waited for the holder's TTL or
// the entry's refresh before, 611 ms a hand-off when measured at TTL 250
// ms (bench/README.md), and MutualExclusion's waiters ran out of their
// 30 s behind PgBouncer at load 20.
const fairMaxPoll = 100 * time.Millisecond

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order
// of arrival, or until ctx is done. Each attempt takes the lock if it is
// free and no live waiter arrived earlier, and otherwise joins the queue
// or refreshes the waiter's row (valid for max(req.TTL, 2 s)), in one
// statement. It tries again when the holder's lease should have ended, on
// a release notification, and at least every third of the row's life.
//
// When ctx ends first, or on a permanent error, it leaves the queue and
// releases the lock if an attempt whose outcome it could not read granted
// it (one statement), then returns an error wrapping
// [driver.ErrNotAcquired] and ctx.Err(). A transient error is retried
// after a backoff of 10 ms doubling up to 1 s.
func (f *Fair) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	var notify <-chan struct{}
	if f.notifier != nil {
		if ch, stop, err := f.notifier.Watch(ctx, req.Key); err == nil {
			defer stop()
			notify = ch
		}
	}
	refresh := max(req.TTL, fairMinEntryTTL) / 3
	backoff := fairMinBackoff
	queued := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		g, err := f.attempt(ctx, req, true)
		if err == nil {
			return g, nil
		}
		var (
			held *driver.HeldError
			wait time.Duration
		)
		switch {
		case ctx.Err() != nil:
			return driver.Grant{}, f.leave(ctx, req, ctx.Err())
		case errors.As(err, &held):
			if !queued {
				queued = true
				driver.NoteQueued(ctx)
			}
			wait = refresh
			if held.RetryAfter > 0 {
				wait, backoff = min(wait, held.RetryAfter), fairMinBackoff
				if notify == nil {
					wait = min(wait, fairMaxPoll)
				}
			} else {
				wait, backoff = min(wait, backoff), min(2*backoff, fairMaxBackoff)
			}
		case errors.Is(err, driver.ErrPermanent), errors.Is(err, driver.ErrClosed):
			return driver.Grant{}, f.leave(ctx, req, err)
		default:
			wait, backoff = backoff, min(2*backoff, fairMaxBackoff)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return driver.Grant{}, f.leave(ctx, req, ctx.Err())
		case <-notify:
		case <-timer.C:
		}
	}
}

// leave removes the waiter's queue row and frees the key if req.Owner
// holds it (an attempt applied whose reply was lost), on a context ctx's
// end does not cancel, and returns cause as AcquireWait's error.
func (f *Fair) leave(ctx context.Context, req driver.AcquireRequest, cause error) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	// An attempt cut by ctx may still be in flight (settled): leaving
	// before it is applied would leave its queue row or grant behind, and
	// the WaitAcquirer contract wants every trace gone on return.
	if err := f.awaitSettled(lctx, req.Key, req.Owner); err != nil {
		return fmt.Errorf("postgres: acquire %q: %w: %w (%v)", req.Key, driver.ErrNotAcquired, cause, err)
	}
	var n int64
	if err := f.pool.QueryRow(lctx, f.leaveSQL, []byte(req.Key), ownerHash(req.Owner), f.channel, payload(req.Key)).Scan(&n); err != nil {
		return fmt.Errorf("postgres: acquire %q: %w: %w (leaving the queue: %v)", req.Key, driver.ErrNotAcquired, cause, err)
	}
	return fmt.Errorf("postgres: acquire %q: %w: %w", req.Key, driver.ErrNotAcquired, cause)
}
