package etcd

// Keepalive streams: the renewals of every lease of a Backend, sent on a
// few long-lived LeaseKeepAlive streams.
//
// Invariants of the stream matching (what makes a reported send time safe):
//   - A lease always uses the same stream (chosen by its ID), and the
//     server answers a stream's requests one by one, in order; so the n-th
//     response for a lease ID on a stream answers the n-th request for that
//     ID on it.
//   - A request is queued under its lease ID (FIFO per ID) before it is
//     sent, under the stream's send lock, so the queue order is the send
//     order; its sender took its send time before queueing it.
//   - A request whose sender gave up (context done) stays queued until its
//     response or the stream's end: a late response is matched to the
//     request it answers, or an earlier one, never to a later one. So a
//     confirmed renewal is never credited with a send time later than the
//     request the server actually applied.
//   - When a stream ends, every request still queued on it fails (a
//     transient error); no response of a dead stream is matched to a
//     request of its successor.
//   - A stream on which nothing came back for a whole renew interval is
//     dropped, so the next renewals open a new one (possibly to another
//     member). A renewal on a stream that still answers others waits for
//     its own answer until its lease's confirmed expiry, not one interval:
//     the server answers in order, so a retry would only queue behind it.

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
// leases over (by lease ID, so each lease always uses the same stream).
// The server answers a stream's requests one at a time, and a member that
// is not the leader forwards each renewal to the leader over HTTP: one
// stream would cap renewals at one per forwarding round trip.
const kaStreams = 8

// kaMux sends the keepalives of every lease of a Backend on a few
// long-lived LeaseKeepAlive streams, each opened on first use and again
// after it ends. clientv3.Lease.KeepAliveOnce opens a new stream per call,
// which at thousands of leases costs more than the renewals themselves.
type kaMux struct {
	b   *Backend
	mu  sync.Mutex
	cur [kaStreams]*kaStream // nil: open one on the next renewal
}

// kaStream is one LeaseKeepAlive stream. The server answers the requests
// of a stream one by one, in order, so each response is matched to the
// oldest unanswered request for the same lease ID (FIFO per ID): the
// caller of that request, who knows when it was sent, gets it. A request
// whose caller gave up stays in its queue, so later responses are never
// matched to later (younger) requests. When the stream ends, every
// unanswered request fails.
type kaStream struct {
	mux    *kaMux
	slot   int
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc

	sendMu sync.Mutex // serialises Send, and the queueing that precedes it

	mu       sync.Mutex
	pending  map[int64][]chan kaResult
	err      error     // set once the stream ended
	lastRecv time.Time // when the last response arrived
}

type kaResult struct {
	ttl int64
	err error
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
	s := &kaStream{mux: m, slot: slot, stream: st, cancel: cancel, pending: make(map[int64][]chan kaResult), lastRecv: time.Now()}
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

// recv matches responses to requests until the stream ends.
func (s *kaStream) recv() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		s.lastRecv = time.Now()
		var ch chan kaResult
		if q := s.pending[resp.ID]; len(q) > 0 {
			ch = q[0]
			if len(q) == 1 {
				delete(s.pending, resp.ID)
			} else {
				s.pending[resp.ID] = q[1:]
			}
		}
		s.mu.Unlock()
		if ch != nil {
			ch <- kaResult{ttl: resp.TTL} // buffered, one value per channel
		}
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
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	s.cancel()
	s.mux.b.opts.Logger.Debug("etcd: keepalive stream ended", "stream", s.slot, "err", err)
	s.mux.mu.Lock()
	if s.mux.cur[s.slot] == s {
		s.mux.cur[s.slot] = nil
	}
	s.mux.mu.Unlock()
	for _, q := range pending {
		for _, ch := range q {
			ch <- kaResult{err: err}
		}
	}
}

// renew sends one keepalive for id and waits for its answer. The caller
// takes the send time before calling renew, so it is never later than the
// real one. It returns the TTL the server applied, an error wrapping
// rpctypes.ErrLeaseNotFound if the lease is gone, or another error if the
// answer did not come (stream ended, ctx done). With silent > 0, the
// stream is dropped (and the renewal fails) if nothing at all came back on
// it within silent of the send; an answer that is merely slow, on a stream
// that answers others, is waited for until ctx is done.
func (m *kaMux) renew(ctx context.Context, id clientv3.LeaseID, silent time.Duration) (int64, error) {
	s, err := m.stream(int(uint64(id) % kaStreams))
	if err != nil {
		return 0, err
	}
	ch := make(chan kaResult, 1)
	s.sendMu.Lock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.sendMu.Unlock()
		return 0, err
	}
	s.pending[int64(id)] = append(s.pending[int64(id)], ch)
	s.mu.Unlock()
	sent := time.Now()
	err = s.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	s.sendMu.Unlock()
	if err != nil {
		s.fail(err)
		return 0, err
	}
	// If nothing at all came back on the stream since our request was
	// sent, the stream (or its member) is stuck: drop it, so that the next
	// renewals open a new one, possibly to another member.
	stuck := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.lastRecv.Before(sent)
	}
	var silentC <-chan time.Time
	if silent > 0 {
		t := time.NewTimer(silent)
		defer t.Stop()
		silentC = t.C
	}
	for {
		select {
		case r := <-ch:
			if r.err != nil {
				return 0, r.err
			}
			if r.ttl <= 0 {
				return 0, rpctypes.ErrLeaseNotFound
			}
			return r.ttl, nil
		case <-silentC:
			silentC = nil
			if stuck() {
				s.fail(errors.New("etcd: keepalive stream unresponsive")) // answers ch
			}
		case <-ctx.Done():
			if stuck() && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				s.fail(errors.New("etcd: keepalive stream unresponsive"))
			}
			return 0, ctx.Err()
		}
	}
}
