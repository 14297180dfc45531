package etcd

// Keepalive streams: the renewals of every lease of a Backend, sent on a
// few long-lived LeaseKeepAlive streams.
//
// Invariants of the stream matching (what makes a reported send time safe):
//   - The server answers a stream's requests one by one, in order (one
//     answer per request, or the stream ends), so the n-th answer on a
//     stream answers the n-th request sent on it. Each stream keeps its
//     unanswered requests in one FIFO queue, each with the lease ID and the
//     send time taken before the request was queued; an answer whose lease
//     ID is not the one at the head of the queue ends the stream (every
//     request on it fails) instead of being matched to another request.
//   - A request is queued before it is sent, under the stream's send lock,
//     so the queue order is the send order.
//   - A request whose sender gave up (context done, renewal timed out)
//     stays queued until its answer or the stream's end: a late answer is
//     matched to the request it answers, never to a later one. So a
//     confirmed renewal is never credited with a send time later than the
//     request the server actually applied.
//   - When a stream ends, every request still queued on it fails (a
//     transient error); no answer of a dead stream is matched to a request
//     of its successor.
//   - A stream on which nothing came back for a whole renew interval after
//     a request was sent is dropped, so the next renewals open a new one
//     (possibly to another member). A renewal on a stream that still
//     answers others waits for its own answer until its lease's confirmed
//     expiry, not one interval: the server answers in order, so a retry
//     would only queue behind it.

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStreams is the number of LeaseKeepAlive streams a Backend spreads its
// leases over (by a hash of the lease ID, so each lease always uses the
// same stream). The server answers a stream's requests one at a time, and
// a member that is not the leader forwards each renewal to the leader over
// HTTP: one stream would cap renewals at one per forwarding round trip.
const kaStreams = 8

// slotOf is the stream slot of a lease: a multiplicative hash of its ID.
// etcd's lease IDs come from a generator shared with request IDs, so the
// ID modulo kaStreams is far from uniform; the hash spreads them evenly.
func slotOf(id clientv3.LeaseID) int {
	return int((uint64(id) * 0x9E3779B97F4A7C15 >> 32) % kaStreams)
}

// kaMux sends the keepalives of every lease of a Backend on a few
// long-lived LeaseKeepAlive streams, each opened on first use and again
// after it ends. clientv3.Lease.KeepAliveOnce opens a new stream per call,
// which at thousands of leases costs more than the renewals themselves.
// Each slot also schedules the renewals of the held leases on its stream
// (kaSlot, kaslot.go).
type kaMux struct {
	b     *Backend
	mu    sync.Mutex
	cur   [kaStreams]*kaStream // nil: open one on the next renewal
	slots [kaStreams]kaSlot
}

// kaStream is one LeaseKeepAlive stream: its unanswered requests in send
// order (see the invariants above).
type kaStream struct {
	mux    *kaMux
	slot   int
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc

	sendMu sync.Mutex // serialises Send, and the queueing that precedes it
	req    pb.LeaseKeepAliveRequest

	mu       sync.Mutex
	queue    []kaWaiter // unanswered requests, oldest first
	err      error      // set once the stream ended
	lastRecv time.Time  // when the last answer arrived
}

// kaWaiter is one unanswered request: the keeper whose renewal it is, or a
// caller of renew waiting on ch.
type kaWaiter struct {
	id   int64
	sent time.Time // taken before the request was queued
	k    *keeper
	ch   chan kaResult
}

type kaResult struct {
	ttl int64
	err error
}

// deliver hands r to the request's owner.
func (w kaWaiter) deliver(r kaResult) {
	if w.k != nil {
		w.k.answer(w.sent, r)
		return
	}
	w.ch <- r // buffered, one value per channel
}

// stream returns the open stream of slot, opening one if needed.
func (m *kaMux) stream(slot int) (*kaStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.cur[slot]; s != nil {
		return s, nil
	}
	if err := m.b.closeCtx.Err(); err != nil {
		return nil, err
	}
	// Require a leader, as clientv3's own keepalive does: a member that
	// loses its leader ends the stream instead of leaving it silent.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.b.closeCtx))
	st, err := pb.NewLeaseClient(m.b.c.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &kaStream{mux: m, slot: slot, stream: st, cancel: cancel, lastRecv: time.Now()}
	m.cur[slot] = s
	m.b.opts.Logger.Debug("etcd: keepalive stream opened", "stream", slot)
	// The caller runs inside b.wg, so the counter is not zero here.
	m.b.wg.Add(1)
	go func() {
		defer m.b.wg.Done()
		s.recv()
	}()
	return s, nil
}

// recv matches answers to requests until the stream ends.
func (s *kaStream) recv() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		s.lastRecv = time.Now()
		if len(s.queue) == 0 || s.queue[0].id != resp.ID {
			s.mu.Unlock()
			s.fail(errors.New("etcd: keepalive answer out of order"))
			return
		}
		w := s.queue[0]
		s.queue[0] = kaWaiter{}
		s.queue = s.queue[1:]
		if len(s.queue) == 0 {
			s.queue = s.queue[:0:0] // let the array go once drained
		}
		s.mu.Unlock()
		w.deliver(kaResult{ttl: resp.TTL})
	}
}

// fail ends the stream: every unanswered request gets err, and the next
// renewal opens a new stream.
func (s *kaStream) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	queue := s.queue
	s.queue = nil
	s.mu.Unlock()
	s.cancel()
	s.mux.b.opts.Logger.Debug("etcd: keepalive stream ended", "stream", s.slot, "err", err)
	s.mux.mu.Lock()
	if s.mux.cur[s.slot] == s {
		s.mux.cur[s.slot] = nil
	}
	s.mux.mu.Unlock()
	for _, w := range queue {
		w.deliver(kaResult{err: err})
	}
}

// send queues and sends the requests ws, in order, under the send lock.
// Every request of ws is answered: by the server, or with an error when
// the stream ends (a send error ends it) or has ended already. The caller
// must not hold locks that answering takes.
func (s *kaStream) send(ws []kaWaiter) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		for _, w := range ws {
			w.deliver(kaResult{err: err})
		}
		return
	}
	s.queue = append(s.queue, ws...)
	s.mu.Unlock()
	for _, w := range ws {
		// SendMsg encodes the message before it returns: one request
		// value serves every send.
		s.req.ID = w.id
		if err := s.stream.Send(&s.req); err != nil {
			s.fail(err)
			return
		}
	}
}

// stuck reports whether nothing at all came back on s since sent.
func (s *kaStream) stuck(sent time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && s.lastRecv.Before(sent)
}

// errUnresponsive ends a stream on which nothing came back for a whole
// renew interval.
var errUnresponsive = errors.New("etcd: keepalive stream unresponsive")

// renew sends one keepalive for id and waits for its answer. The caller
// takes the send time before calling renew, so it is never later than the
// real one. It returns the TTL the server applied, an error wrapping
// rpctypes.ErrLeaseNotFound if the lease is gone, or another error if the
// answer did not come (stream ended, ctx done). If ctx ends with its
// deadline while nothing at all came back on the stream since the send,
// the stream is dropped.
func (m *kaMux) renew(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	s, err := m.stream(slotOf(id))
	if err != nil {
		return 0, err
	}
	ch := make(chan kaResult, 1)
	sent := time.Now()
	s.send([]kaWaiter{{id: int64(id), sent: sent, ch: ch}})
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, r.err
		}
		if r.ttl <= 0 {
			return 0, rpctypes.ErrLeaseNotFound
		}
		return r.ttl, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && s.stuck(sent) {
			s.fail(errUnresponsive)
		}
		return 0, ctx.Err()
	}
}
