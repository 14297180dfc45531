package etcd

// Renewal of held leases (KeepAlive) and of a waiter's lease (a keeper
// without a deletion subscription): no goroutine per lease. Each stream
// slot (kastream.go) has one scheduler goroutine and a heap of its
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
	"sync"
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

// kaSlot schedules the renewals of the keepers whose leases use one
// stream slot.
type kaSlot struct {
	mux     *kaMux
	idx     int
	mu      sync.Mutex
	heap    []*keeper // min-heap by due
	events  []*keeper // keepers told of a deletion or a re-read
	running bool
	closed  bool
	wake    chan struct{} // buffer 1
	// next is when the scheduler looks at the heap next unless woken (its
	// timer): a keeper due no earlier needs no wake-up. Zero until it first
	// runs.
	next time.Time
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
		s.mu.Lock()
		ended := k.state == kEnded
		if !ended {
			k.sub = sub
		}
		s.mu.Unlock()
		if ended {
			b.dw.unsubscribe(sub)
		}
	}
	stop := context.AfterFunc(ctx, func() { k.end(nil) })
	s.mu.Lock()
	ended := k.state == kEnded
	if !ended {
		k.stopCtx = stop
	}
	s.mu.Unlock()
	if ended {
		stop()
	}
	return k
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

// start runs the slot's scheduler if it does not run. Under s.mu; the
// caller runs inside b.wg.
func (s *kaSlot) start() {
	if s.running {
		return
	}
	s.running = true
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	b := s.mux.b
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		s.run()
	}()
}

// signal wakes the scheduler. Under s.mu.
func (s *kaSlot) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the slot's scheduler: until the backend is closed, it handles
// the keepers' events (deletions, re-reads) and their due times: it sends
// the renewals due (as one batch on the slot's stream) and checks the
// renewals whose answers are late. At Close it ends every keeper.
func (s *kaSlot) run() {
	b := s.mux.b
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		batch   []kaWaiter
		keepers []*keeper
		lost    []*keeper
		reads   []*keeper
		stuck   []*kaStream
	)
	for {
		s.mu.Lock()
		now := time.Now()
		// Events first: a deleted key ends its keeper at once.
		for _, k := range s.events {
			k.queued = false
			if k.state == kEnded {
				continue
			}
			if k.deleted > 0 {
				lost = append(lost, k)
				continue
			}
			if k.recheck {
				k.recheck = false
				if !k.rechecking {
					k.rechecking = true
					reads = append(reads, k)
				}
			}
		}
		clear(s.events)
		s.events = s.events[:0]
		for len(s.heap) > 0 && !s.heap[0].due.After(now.Add(s.heap[0].interval/batchSlack)) {
			k := s.heap[0]
			if k.state != kIdle && k.due.After(now) {
				break // a check is never early
			}
			switch k.state {
			case kIdle:
				// reqSent is set again below, once the stream is open.
				k.state, k.reqSent = kSent, now
				k.due = now.Add(k.interval)
				s.fix(k)
				keepers = append(keepers, k)
			case kSent:
				// An interval after the send: if nothing at all came back
				// on the stream since, the stream (or its member) is
				// stuck: drop it, so the next renewals open a new one,
				// possibly to another member. Else wait for the answer as
				// long as it can still keep the lease (until its expiry as
				// last confirmed): the server answers a stream's renewals
				// one by one, so on a busy stream a slow answer comes
				// before any retry would.
				if k.stream != nil && k.stream.stuck(k.reqSent) {
					stuck = append(stuck, k.stream)
				}
				k.state = kLate
				k.due = later(k.d.sent().Add(k.d.ttl), k.reqSent.Add(k.interval))
				if !k.due.After(now) {
					k.due = now.Add(time.Millisecond)
				}
				s.fix(k)
			case kLate:
				// No answer by the lease's confirmed expiry: report it and
				// retry. The request stays queued on its stream; its
				// answer, if it comes, still confirms its send time.
				if k.stream != nil && k.stream.stuck(k.reqSent) {
					stuck = append(stuck, k.stream)
				}
				offer(k.out, driver.Renewal{Sent: k.reqSent,
					Err: errorf("keepalive %q: no answer before the lease's confirmed expiry: %w", k.key, context.DeadlineExceeded)})
				k.state = kIdle
				k.due = now.Add(k.retry)
				s.fix(k)
			}
		}
		closing := b.closeCtx.Err() != nil
		if closing {
			s.closed = true
		}
		wait := time.Hour
		if len(s.heap) > 0 {
			wait = max(s.heap[0].due.Sub(now), 0)
		}
		s.next = now.Add(wait)
		s.mu.Unlock()

		for _, st := range stuck {
			st.fail(errUnresponsive)
		}
		clear(stuck)
		stuck = stuck[:0]
		for _, k := range lost {
			s.mu.Lock()
			rev := k.deleted
			s.mu.Unlock()
			k.lose(errorf("lock key of %q deleted at revision %d (lease expired or revoked, or key removed): %w",
				k.key, rev, driver.ErrNotHeld))
		}
		clear(lost)
		lost = lost[:0]
		for _, k := range reads {
			k.reread()
		}
		clear(reads)
		reads = reads[:0]
		if len(keepers) > 0 && !closing {
			st, err := s.mux.stream(s.idx)
			// The send time is taken once the stream is open (a stream
			// opened now counts as having answered now: a send time
			// before that would never look stuck), before queueing.
			sent := time.Now()
			s.mu.Lock()
			for _, k := range keepers {
				if k.state != kSent || !k.reqSent.Equal(now) {
					continue // ended meanwhile
				}
				k.reqSent, k.stream = sent, st
				batch = append(batch, kaWaiter{id: int64(k.d.lease), sent: sent, k: k})
			}
			s.mu.Unlock()
			if err == nil {
				st.send(batch)
			} else {
				for _, w := range batch {
					w.deliver(kaResult{err: err})
				}
			}
		}
		clear(batch)
		batch = batch[:0]
		clear(keepers)
		keepers = keepers[:0]

		if closing {
			s.mu.Lock()
			all := append([]*keeper(nil), s.heap...)
			s.mu.Unlock()
			for _, k := range all {
				k.end(nil)
			}
			return
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-b.closeCtx.Done():
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// The heap of a slot's keepers, by due. Under s.mu.

func (s *kaSlot) push(k *keeper) {
	k.idx = len(s.heap)
	s.heap = append(s.heap, k)
	s.up(k.idx)
}

func (s *kaSlot) remove(k *keeper) {
	i, n := k.idx, len(s.heap)-1
	if i != n {
		s.swap(i, n)
	}
	s.heap[n] = nil
	s.heap = s.heap[:n]
	k.idx = -1
	if i != n {
		if !s.down(i) {
			s.up(i)
		}
	}
}

func (s *kaSlot) fix(k *keeper) {
	if !s.down(k.idx) {
		s.up(k.idx)
	}
}

func (s *kaSlot) swap(i, j int) {
	h := s.heap
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (s *kaSlot) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !s.heap[j].due.Before(s.heap[i].due) {
			break
		}
		s.swap(i, j)
		j = i
	}
}

func (s *kaSlot) down(i0 int) bool {
	i, n := i0, len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && s.heap[r].due.Before(s.heap[l].due) {
			j = r
		}
		if !s.heap[j].due.Before(s.heap[i].due) {
			break
		}
		s.swap(i, j)
		i = j
	}
	return i > i0
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
