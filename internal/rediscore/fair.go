package rediscore

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
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Backoff of AcquireWait after a transient error.
const (
	fairMinBackoff = 50 * time.Millisecond
	fairMaxBackoff = time.Second
)

// FairMinEntryTTL is the shortest life of a waiter's queue entry: a waiter
// keeps its place through a stall of its process, its connection or the
// server up to this long (less the refresh interval), even with a short
// lease, at the cost that a crashed waiter holds up the hand-off for as
// long. A 1 s entry of a waiter refreshing every 83 ms (a 250 ms lease)
// 170 ms late on a loaded machine sent a waiter to the back of the queue
// (the conformance FIFO check: order [0 2 3 1]).
const FairMinEntryTTL = 2 * time.Second

// fairPollEvery is how often a fair waiter without notifications runs
// wait.lua.
const fairPollEvery = 10 * time.Millisecond

// fairWait is the state of one AcquireWait.
type fairWait struct {
	b         *Backend
	req       driver.AcquireRequest
	call      *Call // wait.lua's KEYS and ARGV
	lease     time.Duration
	refresh   time.Duration // how often the waiter runs wait.lua to keep its entry
	confirmed time.Time     // send time of the last wait.lua that found the waiter queued
	counter   uint64        // the fence counter that wait.lua saw
	backoff   time.Duration
	queued    bool // told driver.NoteQueued
}

// TryFirst reports whether an Acquire of key is worth making before a
// fair waiter queues: yes unless the key's channel is still subscribed
// from a recent wait (see the adapters' Backend.TryFirst). It
// allocates nothing.
func (b *Backend) TryFirst(key string) bool {
	var buf [256]byte
	ch := append(buf[:0], b.opts.KeyPrefix...)
	ch = append(ch, '{')
	ch = append(ch, redisscript.Escape(key)...)
	ch = append(ch, '}')
	ch = append(ch, redisnames.ReleasedSuffix...)
	return !b.hubs.Subscribed(ch)
}

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order
// of arrival, or until ctx is done; with tryFirst it first makes one
// Acquire. The waiter subscribes to the lock's channel through the
// hubs, whose watcher reads the hand-off messages naming it. See the
// adapters' Backend.AcquireWait.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest, tryFirst bool) (driver.Grant, error) {
	if b.c.Closed() {
		return driver.Grant{}, redisscript.ErrClosed("acquire", req.Key)
	}
	w := b.newWait(req)
	if tryFirst {
		g, err := b.Acquire(ctx, req)
		switch {
		case err == nil:
			return g, nil
		case errors.Is(err, driver.ErrNotAcquired):
		case ctx.Err() != nil:
			b.leave(ctx, req)
			return driver.Grant{}, b.waitError(ctx, req.Key)
		case errors.Is(err, driver.ErrPermanent), errors.Is(err, driver.ErrClosed):
			b.leave(ctx, req)
			return driver.Grant{}, err
		default:
			// Transient: wait.lua below takes the lock or queues, whether
			// or not this attempt was applied.
		}
	}
	sub, stop, err := b.hubs.Watch(ctx, req.Key, w.call.Keys[0]+redisnames.ReleasedSuffix, OwnerID(req.Owner))
	if err != nil {
		if ctx.Err() != nil {
			b.leave(ctx, req)
			return driver.Grant{}, b.waitError(ctx, req.Key)
		}
		// No notifications (MaxShardedConns reached, subscription
		// refused): wait by polling wait.lua.
		b.opts.Logger.Debug("redis: fair waiter cannot subscribe; polling", "key", req.Key, "err", err)
		sub = nil
	} else {
		defer stop()
	}
	return w.loop(ctx, sub)
}

// newWait returns the state of an AcquireWait of req.
func (b *Backend) newWait(req driver.AcquireRequest) *fairWait {
	ttl := b.ttl.Get(req.TTL)
	c := b.newCall(req.Key)
	c.Keys = c.names[:] // lock, fence, abandoned, queue
	// The first wait.lua is "new": the owner has no entry yet (a new owner
	// token, or one whose entries a hand-off or take removed), so a held
	// lock is joined without reading the queue. Every later request, a
	// retry of one that may have been applied included, searches it.
	c.args = [4]string{req.Owner, ttl.S, ttl.S, "new"}
	c.Args = c.args[:]
	lease := ttl.Duration()
	if lease < FairMinEntryTTL {
		c.Args[2] = strconv.FormatInt(FairMinEntryTTL.Milliseconds(), 10)
	}
	return &fairWait{b: b, req: req, call: c, lease: lease, refresh: max(lease/3, time.Millisecond), backoff: fairMinBackoff}
}

// grant is the Grant of fence, whose lease started after sent. Its Data
// is the wait's Call, whose last command got its reply: the lease's Renew
// and Release use its names again (see Backend.callFor).
func (w *fairWait) grant(fence uint64, sent time.Time) driver.Grant {
	w.call.done(nil)
	return driver.Grant{Key: w.req.Key, Owner: w.req.Owner, Fence: fencing.Token(fence), TTL: w.lease, Sent: sent, Data: w.call}
}

// loop runs wait.lua until the waiter is granted the lock, ctx ends or an
// error no retry fixes, woken by sub (or polling if nil).
func (w *fairWait) loop(ctx context.Context, sub *Watcher) (driver.Grant, error) {
	b, key := w.b, w.req.Key
	var notify <-chan struct{}
	if sub != nil {
		notify = sub.C()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if b.c.Closed() {
			b.leave(ctx, w.req)
			return driver.Grant{}, redisscript.ErrClosed("acquire", key)
		}
		sent := time.Now()
		fence, wait, err := w.step(ctx, sent, notify == nil)
		if err != nil {
			return driver.Grant{}, err
		}
		if fence > 0 {
			return w.grant(fence, sent), nil
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			b.leave(ctx, w.req)
			return driver.Grant{}, b.waitError(ctx, key)
		case <-timer.C:
		case <-notify:
			// A hand-off to this waiter after the last wait.lua that found
			// it queued (at confirmed) grants a fence above the counter
			// that wait.lua saw; a message with a smaller fence is from a
			// hand-off before it, whose lease this waiter no longer holds
			// (it expired or was taken while a request was on its way, and
			// the waiter queued again): taking that message would date the
			// stale lease from confirmed, after its start.
			if fence := sub.Fence(); fence > w.counter && !w.confirmed.IsZero() {
				return w.grant(fence, w.confirmed), nil
			}
			// Not a (current) hand-off to this waiter: a plain release, a
			// lost connection, Close. Look again.
		}
	}
}

// step runs wait.lua once, sent at sent: the fence granted, or how long
// to wait before the next step; an error ends the wait (the waiter has
// left the queue).
func (w *fairWait) step(ctx context.Context, sent time.Time, polling bool) (uint64, time.Duration, error) {
	b, key := w.b, w.req.Key
	n, vals, err := b.c.EvalInts(ctx, waitScript, w.call)
	if err != nil {
		// The client may still hold the Call and read its arguments (see
		// Call.done): the next request gets a new one, and the old one is
		// only read, never written.
		old := w.call
		w.call = b.newCall(key)
		w.call.Keys = w.call.names[:]
		w.call.args = old.args
		w.call.Args = w.call.args[:]
	}
	w.call.Args[3] = "" // no longer "new"
	if err == nil {
		err = checkWaitReply(n, vals)
	}
	if err == nil && vals == nil {
		return uint64(n), 0, nil
	}
	if err == nil {
		w.confirmed, w.counter, w.backoff = sent, uint64(vals[0]), fairMinBackoff
		if !w.queued {
			w.queued = true
			driver.NoteQueued(ctx) // observe: queued behind a holder (a hand-off if granted)
		}
		wait := w.refresh
		if pttl := time.Duration(vals[1]) * time.Millisecond; pttl > 0 {
			// The holder's lease ends then: its expiry is not announced.
			wait = min(wait, pttl+time.Millisecond)
		}
		if polling {
			wait = min(wait, fairPollEvery)
		}
		return 0, wait, nil
	}
	err = b.c.Wrap("acquire", key, err)
	if ctx.Err() != nil {
		b.leave(ctx, w.req)
		return 0, 0, b.waitError(ctx, key)
	}
	if errors.Is(err, driver.ErrPermanent) || errors.Is(err, driver.ErrClosed) || errors.Is(err, driver.ErrNotAcquired) {
		b.leave(ctx, w.req)
		return 0, 0, err
	}
	b.opts.Logger.Debug("redis: fair wait attempt failed; retrying", "key", key, "err", err, "backoff", w.backoff)
	wait := w.backoff
	w.backoff = min(2*w.backoff, fairMaxBackoff)
	return 0, wait, nil
}

// checkWaitReply checks the reply of wait.lua: a fence n > 0 (vals nil),
// or {counter, pttl} (queued).
func checkWaitReply(n int64, vals []int64) error {
	if vals == nil && n <= 0 {
		return fmt.Errorf("wait.lua: unexpected reply %d", n)
	}
	if vals != nil && (len(vals) != 2 || vals[0] < 0) {
		return fmt.Errorf("wait.lua: unexpected reply %v", vals)
	}
	return nil
}

// leave removes every trace of a waiter that gives up: its queue entry, and
// the lock if it was handed over meanwhile (handed on in turn); the owner
// is recorded so that its requests still on their way refuse to run
// (release.lua's clean-up, as Release of a Grant with Fence 0). It runs
// detached from ctx's cancellation, and after Close (the client is not the
// backend's), bounded by [driver.DefaultReleaseTimeout].
func (b *Backend) leave(ctx context.Context, req driver.AcquireRequest) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
	defer cancel()
	// Its reply does not matter: 0 when nothing was held (the entry, if
	// any, is gone all the same).
	if _, err := b.release(rctx, driver.Grant{Key: req.Key, Owner: req.Owner}); err != nil {
		b.opts.Logger.Warn("redis: a fair waiter that gave up could not leave the queue; its entry expires within its TTL",
			"key", req.Key, "err", err)
	}
}

// waitError is returned when AcquireWait's context ends first: it wraps
// both ErrNotAcquired and the context's error (ErrClosed if the Locker's
// Close ended it).
func (b *Backend) waitError(ctx context.Context, key string) error {
	if errors.Is(context.Cause(ctx), driver.ErrClosed) {
		return redisscript.ErrClosed("acquire", key)
	}
	return fmt.Errorf("redis: acquire %q: %w: %w", key, driver.ErrNotAcquired, ctx.Err())
}

// OwnerID is the id of a fair waiter in hand-off messages: the hex SHA-1
// of its owner token, as release.lua computes it (redis.sha1hex).
func OwnerID(owner string) string {
	sum := sha1.Sum([]byte(owner))
	return hex.EncodeToString(sum[:])
}
