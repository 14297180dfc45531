package etcd

// The scheduler of a keepalive stream slot: one goroutine per slot, a heap
// of the slot's keepers by when each needs attention next. It keeps the
// invariants written at the top of keepalive.go; here, in each round:
//   - events first: a keeper whose key the deletion watch saw deleted ends
//     at once, reported lost (the server's word); one told to re-read
//     starts a re-read unless one runs;
//   - renewals due (or due within interval/batchSlack) leave as one batch
//     on the slot's stream, each with its send time taken once the stream
//     is open and before the request is queued;
//   - a renewal whose answer is late is checked, not resent: at one
//     interval its stream is dropped if silent since the send, at the
//     lease's confirmed expiry the keeper reports it and retries;
//   - at Close every keeper in the heap ends.
// Keepers are moved in the heap and sent to only under the slot's lock;
// ending a keeper, re-reads and stream sends happen outside it.

import (
	"context"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

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

// kaRound is what one round of the scheduler found under the slot's lock
// and acts on outside it. Its slices are reused from round to round.
type kaRound struct {
	now     time.Time
	keepers []*keeper   // renewals to send
	lost    []*keeper   // keys seen deleted
	reads   []*keeper   // re-reads to start
	stuck   []*kaStream // streams silent since a send an interval ago
	batch   []kaWaiter
}

// reset empties r for the next round, keeping its storage.
func (r *kaRound) reset() {
	clear(r.keepers)
	r.keepers = r.keepers[:0]
	clear(r.lost)
	r.lost = r.lost[:0]
	clear(r.reads)
	r.reads = r.reads[:0]
	clear(r.stuck)
	r.stuck = r.stuck[:0]
	clear(r.batch)
	r.batch = r.batch[:0]
}

// run is the slot's scheduler: until the backend is closed, it handles
// the keepers' events (deletions, re-reads) and their due times: it sends
// the renewals due (as one batch on the slot's stream) and checks the
// renewals whose answers are late. At Close it ends every keeper.
func (s *kaSlot) run() {
	b := s.mux.b
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var r kaRound
	for {
		s.mu.Lock()
		r.now = time.Now()
		s.takeEvents(&r)
		s.takeDue(&r)
		closing := b.closeCtx.Err() != nil
		if closing {
			s.closed = true
		}
		wait := time.Hour
		if len(s.heap) > 0 {
			wait = max(s.heap[0].due.Sub(r.now), 0)
		}
		s.next = r.now.Add(wait)
		s.mu.Unlock()

		s.act(&r)
		if !closing {
			s.send(&r)
		}
		r.reset()
		if closing {
			s.endAll()
			return
		}
		s.sleep(timer, wait)
	}
}

// takeEvents moves the keepers told of a deletion or a re-read into r.
// Under s.mu.
func (s *kaSlot) takeEvents(r *kaRound) {
	for _, k := range s.events {
		k.queued = false
		if k.state == kEnded {
			continue
		}
		if k.deleted > 0 {
			r.lost = append(r.lost, k)
			continue
		}
		if k.recheck {
			k.recheck = false
			if !k.rechecking {
				k.rechecking = true
				r.reads = append(r.reads, k)
			}
		}
	}
	clear(s.events)
	s.events = s.events[:0]
}

// takeDue handles the keepers at the top of the heap that need attention:
// renewals due (or due within their interval/batchSlack) go into r, late
// answers are checked. Under s.mu.
func (s *kaSlot) takeDue(r *kaRound) {
	now := r.now
	for len(s.heap) > 0 && !s.heap[0].due.After(now.Add(s.heap[0].interval/batchSlack)) {
		k := s.heap[0]
		if k.state != kIdle && k.due.After(now) {
			break // a check is never early
		}
		switch k.state {
		case kIdle:
			// reqSent is set again in send, once the stream is open.
			k.state, k.reqSent = kSent, now
			k.due = now.Add(k.interval)
			r.keepers = append(r.keepers, k)
		case kSent:
			// An interval after the send: if nothing at all came back on
			// the stream since, the stream (or its member) is stuck: drop
			// it, so the next renewals open a new one, possibly to another
			// member. Else wait for the answer as long as it can still
			// keep the lease (until its expiry as last confirmed): the
			// server answers a stream's renewals one by one, so on a busy
			// stream a slow answer comes before any retry would.
			s.noteStuck(k, r)
			k.state = kLate
			k.due = later(k.d.sent().Add(k.d.ttl), k.reqSent.Add(k.interval))
			if !k.due.After(now) {
				k.due = now.Add(time.Millisecond)
			}
		case kLate:
			// No answer by the lease's confirmed expiry: report it and
			// retry. The request stays queued on its stream; its answer,
			// if it comes, still confirms its send time.
			s.noteStuck(k, r)
			offer(k.out, driver.Renewal{Sent: k.reqSent,
				Err: errorf("keepalive %q: no answer before the lease's confirmed expiry: %w", k.key, context.DeadlineExceeded)})
			k.state = kIdle
			k.due = now.Add(k.retry)
		}
		s.fix(k)
	}
}

// noteStuck adds k's stream to r.stuck if nothing came back on it since
// k's request was sent. Under s.mu.
func (s *kaSlot) noteStuck(k *keeper, r *kaRound) {
	if k.stream != nil && k.stream.stuck(k.reqSent) {
		r.stuck = append(r.stuck, k.stream)
	}
}

// act drops the stuck streams, ends the keepers whose keys were deleted
// and starts the re-reads. The caller holds no lock.
func (s *kaSlot) act(r *kaRound) {
	for _, st := range r.stuck {
		st.fail(errUnresponsive)
	}
	for _, k := range r.lost {
		s.mu.Lock()
		rev := k.deleted
		s.mu.Unlock()
		k.lose(errorf("lock key of %q deleted at revision %d (lease expired or revoked, or key removed): %w",
			k.key, rev, driver.ErrNotHeld))
	}
	for _, k := range r.reads {
		k.reread()
	}
}

// send sends the round's renewals as one batch on the slot's stream. The
// send time is taken once the stream is open (a stream opened now counts
// as having answered now: a send time before that would never look
// stuck), before queueing. The caller holds no lock.
func (s *kaSlot) send(r *kaRound) {
	if len(r.keepers) == 0 {
		return
	}
	st, err := s.mux.stream(s.idx)
	sent := time.Now()
	s.mu.Lock()
	for _, k := range r.keepers {
		if k.state != kSent || !k.reqSent.Equal(r.now) {
			continue // ended meanwhile
		}
		k.reqSent, k.stream = sent, st
		r.batch = append(r.batch, kaWaiter{id: int64(k.d.lease), sent: sent, k: k})
	}
	s.mu.Unlock()
	if err != nil {
		for _, w := range r.batch {
			w.deliver(kaResult{err: err})
		}
		return
	}
	st.send(r.batch)
}

// endAll ends every keeper in the heap, at Close. The caller holds no lock.
func (s *kaSlot) endAll() {
	s.mu.Lock()
	all := append([]*keeper(nil), s.heap...)
	s.mu.Unlock()
	for _, k := range all {
		k.end(nil)
	}
}

// sleep waits wait on timer, or for a wake-up or Close.
func (s *kaSlot) sleep(timer *time.Timer, wait time.Duration) {
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
	case <-s.mux.b.closeCtx.Done():
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
