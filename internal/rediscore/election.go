package rediscore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/feed"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Elections ([driver.Elector]): a term is a lease of the election's lock,
// its fence the lock's fence. The leader's value lives in a record of its
// own beside the lock (lock key + LeaderSuffix: a hash of fence, holder,
// value and the SHA-1 of the owner token), written by proclaim.lua only
// while the lock holds the lease of that fence and holder id. The record
// has no TTL and outlives its term; it is reported only while the fence
// counter, which is the holder's fence while the lock is held, is the
// record's fence and the lock's owner is the record's (leader.lua: a
// counter that starts again, retired or set back by hand, gives a later
// lease the fence of an ended term).

// leaderResync bounds the time a watch of a leader goes without reading
// the state: a wake-up lost while the subscription connection reconnects
// (the hub subscribes again in the background) or a term ended without a
// message (expired, deleted by hand) is seen at most this late.
const leaderResync = 2 * time.Second

// leaderRetry is the pause of a watch of a leader after a failed read.
const leaderRetry = 100 * time.Millisecond

// electionKeys returns the lock key of key and the KEYS of proclaim.lua
// and leader.lua: lock, fence counter, leader record.
func (b *Backend) electionKeys(key string) []string {
	lk := redisscript.LockKey(b.opts.KeyPrefix, key)
	return []string{lk, lk + redisnames.FenceSuffix, lk + redisnames.LeaderSuffix}
}

// Proclaim stores value as the leader's value of key's term of fence and
// holder (proclaim.lua: the server checks that the lock holds that lease,
// computing the holder id of the owner token it holds) and wakes the
// watchers of key, followed by WAIT with WaitReplicas as Acquire; an error
// wrapping [driver.ErrNotHeld] if that lease no longer holds key.
func (b *Backend) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	const op = "proclaim"
	if b.c.Closed() {
		return redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckInspectKey(op, key); err != nil {
		return err
	}
	c := &Call{Keys: b.electionKeys(key)}
	c.Args = []string{strconv.FormatUint(uint64(fence), 10), holder, string(value), ""}
	if b.opts.ShardedPubSub {
		c.Args[3] = "sharded"
	}
	n, acked, err := b.eval(ctx, proclaimScript, c)
	if err != nil {
		return b.c.Wrap(op, key, err)
	}
	if n == 1 && b.unconfirmed(acked) {
		// Stored on the primary only: a failover could lose the value
		// while the term (whose grant was confirmed) goes on.
		return b.opts.NotReplicated(op, key, acked, nil)
	}
	if n != 1 {
		return redisscript.NotHeld(op, key)
	}
	return nil
}

// Leader reports key's current term (leader.lua: the lock, its counter
// and the leader record read at once).
func (b *Backend) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	if err := b.readable("leader", key); err != nil {
		return driver.LeaderInfo{}, err
	}
	r, err := b.readLeader(ctx, key)
	return r.info, err
}

// leaderRead is one read of leader.lua: the term reported, and what the
// watch needs to account for the grants.
type leaderRead struct {
	info    driver.LeaderInfo
	counter fencing.Token // the fence counter (0 if none): the newest grant
	pending bool          // the lease of counter holds the lock, its term not begun (not proclaimed)
	ended   bool          // the term of counter began (proclaimed) and its lease no longer holds the lock
}

// accounted returns the newest grant whose fate this read knows: the
// counter, but for a lease whose term has not begun yet.
func (r leaderRead) accounted() fencing.Token {
	if r.pending {
		return r.counter - 1
	}
	return r.counter
}

// readLeader runs leader.lua and returns key's term and the grants' state.
func (b *Backend) readLeader(ctx context.Context, key string) (leaderRead, error) {
	const op = "leader"
	vals, err := b.c.Eval(ctx, leaderScript, b.electionKeys(key), nil)
	if err != nil {
		return leaderRead{}, b.c.Wrap(op, key, err)
	}
	if len(vals) != 5 {
		return leaderRead{}, fmt.Errorf("redis: %s %q: unexpected reply of %d values", op, key, len(vals))
	}
	var s [4]string
	var found [4]bool
	for i := range s {
		if s[i], found[i], err = vals[i+1].Text(); err != nil {
			return leaderRead{}, fmt.Errorf("redis: %s %q: unexpected reply: %w", op, key, err)
		}
	}
	var counter fencing.Token
	if found[0] {
		var ok bool
		if counter, ok = redisscript.ParseFence(s[0]); !ok {
			return leaderRead{}, fmt.Errorf("redis: %s %q: fence counter %q: %w", op, key, s[0], redisscript.ErrCorrupt)
		}
	}
	pttl, err := vals[0].Int()
	if err != nil {
		return leaderRead{}, fmt.Errorf("redis: %s %q: unexpected reply: %w", op, key, err)
	}
	r := leaderRead{counter: counter}
	proclaimed := counter != 0 && found[1] && s[1] == s[0] && found[2]
	switch {
	case pttl > 0 && proclaimed:
		r.info = driver.LeaderInfo{Held: true, Fence: counter, Holder: s[2], Value: []byte(s[3]), TTL: time.Duration(pttl) * time.Millisecond}
	case pttl > 0:
		r.pending = counter != 0 // granted, its term not begun
	case proclaimed:
		r.ended = true
	}
	return r, nil
}

// WatchLeader watches key's terms: it subscribes to key's release channel
// on the hubs (release.lua and proclaim.lua publish on it), reads the
// state, and reads it again at every wake-up, at the current term's expiry
// and at least every leaderResync; each read that shows another leader (or
// none after one) is delivered. Every grant increments the fence counter,
// so a read that finds grants it cannot account for (fences between the
// last read's counter and the term it reports, or a newest term that
// began and ended unseen: its record carries the counter, its lock is
// gone) delivers its state with Missed: a term may have begun and ended
// between two reads. A lease granted but not proclaimed is accounted for
// only at a later read, where its term began, ended or never began. A
// failed read marks the next event Missed too.
func (b *Backend) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	const op = "watch leader"
	if b.c.Closed() {
		return nil, nil, redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckInspectKey(op, key); err != nil {
		return nil, nil, err
	}
	w, stopW, err := b.hubs.Watch(ctx, key, b.electionKeys(key)[0]+redisnames.ReleasedSuffix, "")
	if err != nil {
		return nil, nil, err
	}
	// Subscribed first: a change after this read publishes a wake-up.
	r, err := b.readLeader(ctx, key)
	if err != nil {
		stopW()
		return nil, nil, err
	}
	events, stop := feed.Start(ctx, func(ctx context.Context, out chan<- driver.LeaderEvent) {
		defer stopW()
		f := leaderFollower{b: b, key: key, w: w, out: out, last: r.info, counter: r.accounted()}
		f.run(ctx)
	})
	return events, stop, nil
}

// leaderFollower is the goroutine of one WatchLeader.
type leaderFollower struct {
	b       *Backend
	key     string
	w       *Watcher
	out     chan<- driver.LeaderEvent
	last    driver.LeaderInfo // the state delivered last
	newest  fencing.Token     // the greatest fence delivered
	counter fencing.Token     // the newest grant whose fate was known at the last read (see leaderRead.accounted)
	missed  bool              // a change may have been lost since the last event
	failed  bool              // the last read failed
}

// run delivers the first state, then every change, until ctx ends or the
// backend is closed (Close wakes every watcher).
func (f *leaderFollower) run(ctx context.Context) {
	timer := time.NewTimer(leaderResync)
	defer timer.Stop()
	evs := []driver.LeaderEvent{{LeaderInfo: f.last}}
	f.newest = f.last.Fence
	for {
		for _, ev := range evs {
			select {
			case f.out <- ev:
			case <-ctx.Done():
				return
			}
		}
		wait := leaderResync
		switch {
		case f.failed:
			wait = leaderRetry
		case f.last.Held && f.last.TTL < wait:
			wait = f.last.TTL + time.Millisecond
		}
		timer.Reset(wait)
		select {
		case <-f.w.C():
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		if f.b.c.Closed() {
			return
		}
		evs = f.next(ctx)
	}
}

// next reads the state and returns the events to deliver: none if the
// leader did not change (or the read failed: it is tried again soon, and
// the next event says Missed), the state read, and before a term that
// follows the term delivered last, that term's end: terms are leases of
// one lock, so a state with no leader came between (a term that expired
// has no message, and its successor may lead before the expiry is read).
func (f *leaderFollower) next(ctx context.Context) []driver.LeaderEvent {
	r, err := f.b.readLeader(ctx, f.key)
	if f.failed = err != nil; f.failed {
		f.missed = true
		return nil
	}
	info := r.info
	// Grants since the last read whose terms this read does not show: each
	// may have begun and ended unseen. Of the grants after f.counter, all
	// but the newest are unseen; the newest is the term reported, a lease
	// whose term has not begun (accounted for at a later read), a lease
	// ended before its term began (nothing to report), or a term begun
	// and ended: unseen unless it was delivered.
	accounted := r.accounted()
	switch {
	case accounted < f.counter:
		f.missed = true // a counter retired and started again: the history is in doubt
	case r.counter > f.counter+1:
		f.missed = true
	case r.ended && r.counter > f.counter && r.counter > f.newest:
		f.missed = true
	}
	granted := f.missed
	f.counter = accounted
	if info.Held && info.Fence < f.newest {
		// Below a term delivered: a fence counter retired and started
		// again. Never delivered; the state is in doubt.
		f.missed = true
		return nil
	}
	// A change, or grants unaccounted for: the terms they began (and
	// ended) are reported missed, with the state now, even if it is the
	// state delivered last.
	prev := f.last
	changed := info.Held != prev.Held || info.Fence != prev.Fence
	f.last = info
	if !changed && !granted {
		return nil
	}
	if info.Held {
		f.newest = info.Fence
	}
	var evs []driver.LeaderEvent
	if prev.Held && info.Held && info.Fence != prev.Fence {
		evs = append(evs, driver.LeaderEvent{})
	}
	evs = append(evs, driver.LeaderEvent{LeaderInfo: info, Missed: f.missed})
	f.missed = false
	return evs
}
