package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/rueidis"
)

// FairBackend is a [Backend] whose waiters queue on the server, in the
// lock's hash slot, and are granted the lock in the order they arrived:
// it implements [driver.WaitAcquirer], so [fencedlock.Locker.Acquire]
// waits through [FairBackend.AcquireWait] instead of retrying. A release
// (by any Backend on the store) hands the lock to the first live waiter in
// the same atomic step and wakes that waiter alone, instead of waking every
// waiter to race for it.
//
// Its Acquire (TryAcquire) does not queue, and does not take a lock
// whose waiters are queued, even when it is free (after a holder's lease
// expired; release hands it over before it is ever free otherwise). Its
// other methods are those of the embedded Backend.
type FairBackend struct {
	*Backend
}

var (
	_ driver.WaitAcquirer   = (*FairBackend)(nil)
	_ driver.TryFirstWaiter = (*FairBackend)(nil)
)

// NewFair returns a FairBackend on client. Options, errors and ownership
// of client are those of [New].
func NewFair(client rueidis.Client, opts Options) (*FairBackend, error) {
	b, err := New(client, opts)
	if err != nil {
		return nil, err
	}
	return &FairBackend{b}, nil
}

// Backoff of AcquireWait after a transient error.
const (
	fairMinBackoff = 50 * time.Millisecond
	fairMaxBackoff = time.Second
)

// fairMinEntryTTL is the shortest life of a waiter's queue entry: a waiter
// keeps its place through a stall of its process, its connection or the
// server up to this long (less the refresh interval), even with a short
// lease, at the cost that a crashed waiter holds up the hand-off for as
// long. With the entry valid for only the lease (250 ms), one refresh
// 170 ms late on a loaded machine sent a waiter to the back of the queue
// (the conformance FIFO check: order [0 2 3 1]).
const fairMinEntryTTL = 2 * time.Second

// Acquire makes one attempt to take req.Key, as [Backend.Acquire] does,
// except that while waiters are queued on the key it takes nothing, even
// if the lock is free (its holder's lease expired and the first waiter has
// not yet run wait.lua again): it returns a *[driver.HeldError] with
// RetryAfter 0, and the caller queues behind them ([FairBackend.AcquireWait]).
// One command more than [Backend.Acquire] (EXISTS of the queue key).
func (f *FairBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return f.Backend.acquire(ctx, req, true)
}

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order of
// arrival, or until ctx is done.
//
// A waiter first makes one attempt ([FairBackend.Acquire]: the
// uncontended path costs what [Backend.Acquire] costs and one EXISTS), unless the
// key's channel is still subscribed from a recent wait of this backend.
// Then it subscribes to the key's channel and runs
// internal/redisscript/wait.lua, which takes the lock if it is free and no
// live waiter is ahead, and otherwise appends an entry to the key's queue
// (lock key + ":queue", a list in the same hash slot) valid for req.TTL of
// server time, and at least 2 s. The waiter runs wait.lua again every
// req.TTL/3 to keep its entry alive (and when the holder's lease should
// have ended, or a message that is not its own hand-off arrives), so the
// entry of a waiter that crashed or was cut off expires within max(req.TTL,
// 2 s) and is skipped.
// release.lua hands the lock to the first live entry: the waiter's owner
// token with req.TTL from the hand-off, the next fence, and a message
// naming the waiter.
//
// The returned Grant's Sent is the send time of the last request that
// found the waiter still queued, before the hand-off; its lease on the
// server started later, so the Locker's local deadline ends first.
//
// When ctx ends first, or on a permanent error, AcquireWait removes the
// waiter from the queue and releases the lock if it was handed over
// meanwhile (release.lua's clean-up: it also records the owner, so that a
// wait.lua still on its way refuses to run), then returns an error
// wrapping [driver.ErrNotAcquired] and ctx.Err(). A transient error
// (connection lost, timeout) is retried after a backoff of 50 ms doubling
// up to 1 s, for as long as ctx allows: wait.lua is idempotent (a waiter
// already queued keeps its place).
func (f *FairBackend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return f.acquireWait(ctx, req, f.TryFirst(req.Key))
}

// TryFirst implements [driver.TryFirstWaiter]: it reports whether an
// Acquire of key is worth making before waiting in the queue, which is
// what AcquireWait itself does first: yes unless the key's channel is
// still subscribed from a recent wait of this backend (waiters of key are
// likely queued: the attempt would find the lock handed over, never free).
// It allocates nothing.
func (f *FairBackend) TryFirst(key string) bool {
	h := f.hub
	if h == nil {
		return true // ShardedPubSub: no shared hub to ask
	}
	var buf [256]byte
	ch := append(buf[:0], f.opts.KeyPrefix...)
	ch = append(ch, '{')
	ch = append(ch, redisscript.Escape(key)...)
	ch = append(ch, '}')
	ch = append(ch, releasedSuffix...)
	return !h.subscribed(ch)
}

// AcquireWaitHeld implements [driver.TryFirstWaiter]: AcquireWait after
// an Acquire of req (made by the Locker on the caller's context) did not
// take the key. It goes straight to the queue (wait.lua, which also grants
// the lock if that Acquire was applied after all and its reply lost).
func (f *FairBackend) AcquireWaitHeld(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return f.acquireWait(ctx, req, false)
}

// acquireWait is AcquireWait, with its first plain attempt (tryFirst) or
// without.
func (f *FairBackend) acquireWait(ctx context.Context, req driver.AcquireRequest, tryFirst bool) (driver.Grant, error) {
	b := f.Backend
	if b.closed.Load() {
		return driver.Grant{}, errClosed("acquire", req.Key)
	}
	lks := b.newLockKeys(req.Key)
	ch := lks.acq[0] + releasedSuffix
	if tryFirst {
		g, err := f.Acquire(ctx, req)
		switch {
		case err == nil:
			return g, nil
		case errors.Is(err, driver.ErrNotAcquired):
		case ctx.Err() != nil:
			f.leave(ctx, req)
			return driver.Grant{}, f.waitError(ctx, req.Key)
		case errors.Is(err, driver.ErrPermanent), errors.Is(err, driver.ErrClosed):
			f.leave(ctx, req)
			return driver.Grant{}, err
		default:
			// Transient: wait.lua below takes the lock or queues, whether
			// or not this attempt was applied.
		}
	}

	w, stop, err := f.watch(ctx, req.Key, ch, ownerID(req.Owner))
	if err != nil {
		if ctx.Err() != nil {
			f.leave(ctx, req)
			return driver.Grant{}, f.waitError(ctx, req.Key)
		}
		// No notifications (MaxShardedConns reached, subscription
		// refused): wait by polling wait.lua.
		b.opts.Logger.Debug("redis: fair waiter cannot subscribe; polling", "key", req.Key, "err", err)
	} else {
		defer stop()
	}
	var notify <-chan struct{}
	if w != nil {
		notify = w.ch
	}

	ttl := b.ttl.Get(req.TTL)
	keys := lks.acq[:] // lock, fence, abandoned, queue
	lease := ttl.Duration()
	// The first wait.lua is "new": the owner has no entry yet (a new owner
	// token, or one whose entries a hand-off or take removed), so a held
	// lock is joined without reading the queue. Every later request, a
	// retry of one that may have been applied included, searches it.
	args := []string{req.Owner, ttl.S, ttl.S, "new"}
	if lease < fairMinEntryTTL {
		args[2] = strconv.FormatInt(fairMinEntryTTL.Milliseconds(), 10)
	}
	refresh := max(lease/3, time.Millisecond)
	grant := func(fence uint64, sent time.Time) driver.Grant {
		return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(fence), TTL: lease, Sent: sent, Data: lks}
	}
	var (
		confirmed time.Time // send time of the last wait.lua that found the waiter queued
		counter   uint64    // the fence counter that wait.lua saw
		backoff   = fairMinBackoff
		timer     = time.NewTimer(time.Hour)
		queued    bool // told NoteQueued
	)
	defer timer.Stop()
	for {
		if b.closed.Load() {
			f.leave(ctx, req)
			return driver.Grant{}, errClosed("acquire", req.Key)
		}
		sent := time.Now()
		r, err := runWaitScript(ctx, b.c, keys, args)
		args[3] = ""
		wait := refresh
		switch {
		case err == nil && r.fence > 0:
			return grant(r.fence, sent), nil
		case err == nil:
			confirmed, counter, backoff = sent, r.counter, fairMinBackoff
			if !queued {
				queued = true
				driver.NoteQueued(ctx) // observe: queued behind a holder (a hand-off if granted)
			}
			if r.pttl > 0 {
				// The holder's lease ends then: its expiry is not announced.
				wait = min(wait, r.pttl+time.Millisecond)
			}
			if notify == nil {
				wait = min(wait, b.pollEvery())
			}
		default:
			err = wrap("acquire", req.Key, err)
			if ctx.Err() != nil {
				f.leave(ctx, req)
				return driver.Grant{}, f.waitError(ctx, req.Key)
			}
			if errors.Is(err, driver.ErrPermanent) || errors.Is(err, driver.ErrClosed) || errors.Is(err, driver.ErrNotAcquired) {
				f.leave(ctx, req)
				return driver.Grant{}, err
			}
			b.opts.Logger.Debug("redis: fair wait attempt failed; retrying", "key", req.Key, "err", err, "backoff", backoff)
			wait = backoff
			backoff = min(2*backoff, fairMaxBackoff)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			f.leave(ctx, req)
			return driver.Grant{}, f.waitError(ctx, req.Key)
		case <-timer.C:
		case <-notify:
			// A hand-off to this waiter after the last wait.lua that found
			// it queued (at confirmed) grants a fence above the counter
			// that wait.lua saw; a message with a smaller fence is from a
			// hand-off before it, whose lease this waiter no longer holds
			// (it expired or was taken while a request was on its way, and
			// the waiter queued again): taking that message would date the
			// stale lease from confirmed, after its start.
			if fence := w.fence.Load(); fence > counter && !confirmed.IsZero() {
				return grant(fence, confirmed), nil
			}
			// Not a (current) hand-off to this waiter: a plain release, a
			// lost connection, Close. Look again.
		}
	}
}

// waitResult is the reply of wait.lua: the fence granted, or (fence 0) the
// fence counter when the waiter was found queued and the holder's
// remaining lease, if known.
type waitResult struct {
	fence   uint64
	counter uint64
	pttl    time.Duration
}

// runWaitScript runs wait.lua and decodes its reply: an integer (granted)
// or an array {counter, pttl} (queued).
func runWaitScript(ctx context.Context, c rueidis.Client, keys, args []string) (waitResult, error) {
	m, err := waitScript.Exec(ctx, c, keys, args).ToMessage()
	if err != nil {
		return waitResult{}, err
	}
	if vals, err := m.AsIntSlice(); err == nil {
		if len(vals) != 2 || vals[0] < 0 {
			return waitResult{}, fmt.Errorf("wait.lua: unexpected reply %v", vals)
		}
		return waitResult{counter: uint64(vals[0]), pttl: time.Duration(vals[1]) * time.Millisecond}, nil
	}
	n, err := m.AsInt64()
	if err != nil {
		return waitResult{}, err
	}
	if n <= 0 {
		return waitResult{}, fmt.Errorf("wait.lua: unexpected reply %d", n)
	}
	return waitResult{fence: uint64(n)}, nil
}

// pollEvery is how often a fair waiter without notifications runs wait.lua.
func (b *Backend) pollEvery() time.Duration { return 10 * time.Millisecond }

// watch subscribes the waiter id to the key's channel (the backend's hub,
// or with ShardedPubSub the hub of the channel's slot).
func (f *FairBackend) watch(ctx context.Context, key, channel, id string) (*watcher, func(), error) {
	b := f.Backend
	h, unref, err := b.hubFor(ctx, channel)
	if errors.Is(err, driver.ErrClosed) {
		return nil, nil, errClosed("watch", key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	w, stop, err := h.watch(ctx, key, channel, id)
	if err != nil {
		unref()
		return nil, nil, err
	}
	return w, func() {
		stop()
		unref()
	}, nil
}

// leave removes every trace of a waiter that gives up: its queue entry, and
// the lock if it was handed over meanwhile (handed on in turn); the owner
// is recorded so that its requests still on their way refuse to run. It
// runs detached from ctx's cancellation (and after Close: the client is
// not the backend's), bounded by [driver.DefaultReleaseTimeout].
func (f *FairBackend) leave(ctx context.Context, req driver.AcquireRequest) {
	b := f.Backend
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
	defer cancel()
	args := []string{req.Owner, "", abandonTTLms}
	if b.sharded {
		args[1] = "sharded"
	}
	if err := runScript(rctx, b.c, releaseScript, releaseKeys(b.LockKey(req.Key)), args).Error(); err != nil {
		b.opts.Logger.Warn("redis: a fair waiter that gave up could not leave the queue; its entry expires within its TTL",
			"key", req.Key, "err", err)
	}
}

// waitError is returned when AcquireWait's context ends first: it wraps
// both ErrNotAcquired and the context's error (ErrClosed if the Locker's
// Close ended it).
func (f *FairBackend) waitError(ctx context.Context, key string) error {
	if errors.Is(context.Cause(ctx), driver.ErrClosed) {
		return errClosed("acquire", key)
	}
	return fmt.Errorf("redis: acquire %q: %w: %w", key, driver.ErrNotAcquired, ctx.Err())
}

// ownerID is the id of a fair waiter in hand-off messages: the hex SHA-1 of
// its owner token, as release.lua computes it (redis.sha1hex).
func ownerID(owner string) string {
	sum := sha1.Sum([]byte(owner))
	return hex.EncodeToString(sum[:])
}
