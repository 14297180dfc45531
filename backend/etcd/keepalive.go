package etcd

// Renewal of held leases (KeepAlive) and of a waiter's lease (a keeper
// without a deletion subscription): no goroutine per lease. Each stream
// slot (kastream.go) has one scheduler goroutine (kaslot.go) and a heap of its
// keepers ordered by when each needs attention; it sends the renewals due
// together, as one batch on the slot's stream, and the stream's receiver
// hands each answer to its keeper. The shared deletion watch (delwatch.go)
// notifies keepers directly.
//
// Invariants: every Renewal carries the send time of the request the server
// confirmed (taken before sending), never a later one, and a holder's key
// is proven ours after each renewal (prove.go); a lease is reported
// lost (ErrNotHeld) only on the server's word (lease not found, key deleted
// or recreated); a keeper whose subscription could not be proven complete
// re-reads its key once the watch runs, and again after the next renewal
// if that read failed. Every keeper that has not ended is in its slot's
// heap exactly once; it ends exactly once (its context done, its lease
// lost, or the backend closed), and then sends nothing more and closes its
// channel. All sends on a keeper's channel happen under its slot's lock.

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// batchSlack: a renewal due within its interval/batchSlack is sent with
// the batch being sent now (renewing early is always safe: the send time
// is taken before sending). The leases of a stream then fall into a few
// phases, each renewed as one batch: bursts of requests leave in a few
// writes and their answers are read in a few wake-ups, which costs less
// than spreading the same renewals out (measured at 10,000 leases, TTL 3 s:
// client CPU per lease per second 10.6-12.0 us with interval/2 against
// 13.2-15.4 us with interval/8 and 20.6-23.5 us with interval/32, and the
// server's 10.2-11.9 us against 12.4-14.9 us). Leases that joined late are
// renewed early once and then share their phase's batch, so in the steady
// state each lease is renewed once per interval. The price is the burst:
// the last answer of a batch waits for the server to renew all of the
// batch's leases on the stream, one by one.
const batchSlack = 2

// KeepAlive keeps g's lease alive until ctx is done or the backend is
// closed: one etcd keepalive every RenewInterval of the request that
// granted it (TTL/3 if it asked for none, or for one not shorter than the
// TTL the server applied) on one of the backend's shared keepalive
// streams, counted from the send time of the last confirmed renewal (a
// renewal due within half an interval may go early, with others due
// then), and a subscription to the backend's shared watch of deleted
// keys. It sends a Renewal with the request's send time and the TTL the
// server applied after each renewal the server confirmed (after which
// g's key is proven still ours, by the shared watch's progress or by a
// read of the key, see prove.go), a Renewal whose Err is
// transient after a failed one (retried after a quarter of the interval:
// TTL/12 by default), and a final Renewal
// wrapping [driver.ErrNotHeld] when the server answers that the lease
// is gone or the shared watch or a read sees g's key deleted; then it closes the
// channel. A channel closed while ctx is not done means the lease can no
// longer be kept alive. A pending Renewal not yet received is replaced by
// a newer one. KeepAlive starts no goroutine of its own.
func (b *Backend) KeepAlive(ctx context.Context, g driver.Grant) <-chan driver.Renewal {
	out, _ := b.KeepAliveStop(ctx, g)
	return out
}

// KeepAliveStop is [Backend.KeepAlive] that also returns stop, which ends
// the keepalive at once, on the caller's goroutine, as the end of ctx
// would ([driver.KeepAliveStopper]): once stop has returned, no renewal
// of g's lease is sent and the channel is closed. The Locker calls it on
// Release, so the release is not sent after a goroutine hand-off.
func (b *Backend) KeepAliveStop(ctx context.Context, g driver.Grant) (<-chan driver.Renewal, func()) {
	out := make(chan driver.Renewal, 1)
	d, ok := g.Data.(*grant)
	if !ok || d == nil {
		out <- driver.Renewal{Err: errorf("keepalive %q: grant was not made by this backend: %w", g.Key, driver.ErrNotHeld)}
		close(out)
		return out, func() {}
	}
	if err := b.begin(); err != nil {
		close(out)
		return out, func() {}
	}
	defer b.wg.Done()
	k := b.startKeeper(ctx, g.Key, d, out, d.held+1)
	return out, func() { k.end(nil) }
}

// offer sends r on out, replacing a pending value: out has a buffer of one
// and a single sender at a time (the slot's lock), so the send never
// blocks.
func offer(out chan driver.Renewal, r driver.Renewal) {
	for {
		select {
		case out <- r:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// keeper states.
const (
	kIdle  = iota // next renewal at due
	kSent         // a renewal awaits its answer; at due, drop the stream if it was silent since
	kLate         // the renewal's answer is slow; at due (the lease's confirmed expiry), give up on it
	kEnded        // ended: out closed, out of the heap
)

// keeper renews one lease: a waiter's while it waits, or a holder's.
type keeper struct {
	b        *Backend
	slot     *kaSlot
	key      string
	d        *grant
	out      chan driver.Renewal
	interval time.Duration
	retry    time.Duration
	done     chan struct{} // a waiter's keeper (no deletion watch): closed when it has ended; else nil

	// Under slot.mu:
	idx        int       // in slot.heap; -1 when not in it
	due        time.Time // when the keeper needs attention next
	state      uint8
	reqSent    time.Time // send time of the latest renewal request
	stream     *kaStream // the stream it was sent on
	deleted    int64     // the key's deletion revision, once seen
	recheck    bool      // re-read the key: a deletion may have been missed
	rechecking bool      // a re-read runs
	rewatch    bool      // a re-read failed: try again after the next renewal
	queued     bool      // in slot.events
	sub        *delSub
	stopCtx    func() bool
	pendSent   time.Time // a holder's latest renewal after which its key is not yet proven ours
	proving    bool      // a proof of the key runs for pendSent (prove.go)
}

// startKeeper starts renewing d's lease, sending Renewals on out, until
// ctx ends, the lease is lost, or the backend is closed. With watchFrom >
// 0 it also subscribes to the deletion of d's key at revisions from
// watchFrom on (one past the revision at which d was known to hold the
// lock) and reports it; d.rev must then be set and no longer change. The
// caller runs inside b.wg.
func (b *Backend) startKeeper(ctx context.Context, key string, d *grant, out chan driver.Renewal, watchFrom int64) *keeper {
	interval := d.interval()
	s := &b.ka.slots[slotOf(d.lease)]
	k := &keeper{b: b, slot: s, key: key, d: d, out: out, interval: interval,
		retry: max(interval/4, 5*time.Millisecond), idx: -1}
	if watchFrom == 0 {
		k.done = make(chan struct{}) // the queue waits for a waiter's keeper to end
	}
	b.wg.Add(1) // returned by end

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		k.end(nil)
		return k
	}
	k.due = d.sent().Add(interval)
	s.start()
	s.push(k)
	if k.idx == 0 && k.due.Before(s.next) {
		// Wake the scheduler only if its timer would fire after k is due.
		// A lease reused for the same lock keeps its send time, so a
		// keeper often replaces one with the same due time, whose timer
		// is still set: no goroutine wake-up per acquire.
		s.signal()
	}
	s.mu.Unlock()

	if watchFrom > 0 {
		sub := b.dw.subscribe(k, d.name, watchFrom)
		k.attach(func() { k.sub = sub }, func() { b.dw.unsubscribe(sub) })
	}
	stop := context.AfterFunc(ctx, func() { k.end(nil) })
	k.attach(func() { k.stopCtx = stop }, func() { stop() })
	return k
}

// attach hands k something its end lets go of (set stores it, under the
// slot's lock) unless k has ended meanwhile: then undo lets go of it at
// once, without the lock.
func (k *keeper) attach(set, undo func()) {
	s := k.slot
	s.mu.Lock()
	ended := k.state == kEnded
	if !ended {
		set()
	}
	s.mu.Unlock()
	if ended {
		undo()
	}
}

// end ends k once: it sends last (if set) as the final Renewal, closes
// out, and lets go of everything k holds. The caller holds no lock.
func (k *keeper) end(last *driver.Renewal) {
	s := k.slot
	s.mu.Lock()
	if k.state == kEnded {
		s.mu.Unlock()
		return
	}
	k.state = kEnded
	if k.idx >= 0 {
		s.remove(k)
	}
	if last != nil {
		offer(k.out, *last)
	}
	close(k.out)
	sub, stop := k.sub, k.stopCtx
	k.sub, k.stopCtx = nil, nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	if sub != nil {
		k.b.dw.unsubscribe(sub)
	}
	if k.done != nil {
		close(k.done)
	}
	k.b.wg.Done()
}

// lose ends k, reporting its lease lost with err.
func (k *keeper) lose(err error) {
	k.end(&driver.Renewal{Sent: time.Now(), Err: err})
}

// notify is called by the deletion watch, under its lock: rev > 0 is the
// revision at which k's key was deleted; 0 asks for a re-read.
func (k *keeper) notify(rev int64) {
	s := k.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.state == kEnded {
		return
	}
	if rev > 0 {
		if k.deleted == 0 {
			k.deleted = rev
		}
	} else {
		k.recheck = true
	}
	if !k.queued {
		k.queued = true
		s.events = append(s.events, k)
	}
	s.signal()
}

// answer is the outcome of k's renewal request sent at sent. The caller
// holds no lock.
func (k *keeper) answer(sent time.Time, r kaResult) {
	s := k.slot
	s.mu.Lock()
	if k.state == kEnded {
		s.mu.Unlock()
		return
	}
	latest := sent.Equal(k.reqSent) && k.state != kIdle
	switch {
	case r.err != nil:
		if latest {
			offer(k.out, driver.Renewal{Sent: sent, Err: errorf("keepalive %q: %w", k.key, r.err)})
			k.state = kIdle
			k.setDue(time.Now().Add(k.retry))
		}
		s.mu.Unlock()
		return
	case r.ttl <= 0:
		s.mu.Unlock()
		k.lose(errorf("lease of %q expired or revoked: %w", k.key, driver.ErrNotHeld))
		return
	}
	k.d.renewed(sent)
	offer(k.out, driver.Renewal{Sent: sent, TTL: time.Duration(r.ttl) * time.Second})
	prove := false
	if k.done == nil {
		// A holder: the lease alone is not the lock. Its key must be
		// proven still ours after sent (prove.go), else it is lost.
		if sent.After(k.pendSent) {
			k.pendSent = sent
		}
		prove = !k.proving
		k.proving = true
	}
	if latest {
		// The next renewal is due at sent+interval: where the keeper
		// already is in the heap (its silent check), so it usually stays
		// put; an answer that came after that check moves it back.
		k.state = kIdle
		if next := sent.Add(k.interval); !k.due.Equal(next) {
			k.setDue(next)
		}
	}
	reread := k.rewatch && !k.rechecking
	if reread {
		k.rechecking = true
	}
	s.mu.Unlock()
	if prove {
		k.b.dw.needProof(k)
	}
	if reread {
		k.reread()
	}
}

// setDue moves k in the heap to due t. Under s.mu.
func (k *keeper) setDue(t time.Time) {
	k.due = t
	if k.idx >= 0 {
		k.slot.fix(k)
		if k.idx == 0 {
			k.slot.signal()
		}
	}
}

// reread re-reads k's key in the background (the shared watch may have
// missed its deletion). k.rechecking is set; the caller holds no lock.
func (k *keeper) reread() {
	b := k.b
	b.wg.Add(1) // the caller runs inside b.wg (a keeper not ended holds a count)
	go func() {
		defer b.wg.Done()
		gone, ok := b.recheck(b.closeCtx, k.d, k.interval)
		if gone {
			k.lose(errorf("lock key of %q deleted: %w", k.key, driver.ErrNotHeld))
			return
		}
		s := k.slot
		s.mu.Lock()
		k.rechecking = false
		k.rewatch = !ok
		s.mu.Unlock()
	}()
}

// recheck reads d's key when the shared watch may have missed its
// deletion. It reports whether the key is gone (or is another's), and
// whether the read succeeded (if not, try again later).
func (b *Backend) recheck(ctx context.Context, d *grant, timeout time.Duration) (gone, ok bool) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := b.c.Get(rctx, d.name)
	if err != nil {
		return false, false
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != d.rev {
		return true, true
	}
	return false, true
}
