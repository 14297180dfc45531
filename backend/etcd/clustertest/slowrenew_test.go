package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock/driver"
)

// slowAnswers delays the LeaseKeepAlive answers for one lease ID by a
// fixed time, and passes every other answer on at once.
type slowAnswers struct {
	id    atomic.Int64 // the slowed lease; 0: none
	delay time.Duration
}

func (s *slowAnswers) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
		return cs, err
	}
	w := &slowStream{ClientStream: cs, out: make(chan slowMsg, 1024)}
	go func() {
		// Answers still delayed when the stream ends are dropped, as a
		// dead stream's would be (out has room for every one).
		var timers []*time.Timer
		for {
			resp := new(pb.LeaseKeepAliveResponse)
			if err := cs.RecvMsg(resp); err != nil {
				for _, tm := range timers {
					tm.Stop()
				}
				w.out <- slowMsg{err: err}
				return
			}
			if resp.ID != 0 && resp.ID == s.id.Load() {
				timers = append(timers, time.AfterFunc(s.delay, func() { w.out <- slowMsg{resp: resp} }))
				continue
			}
			w.out <- slowMsg{resp: resp}
		}
	}()
	return w, nil
}

type slowMsg struct {
	resp *pb.LeaseKeepAliveResponse
	err  error
}

type slowStream struct {
	grpc.ClientStream
	out chan slowMsg
}

func (w *slowStream) RecvMsg(m any) error {
	msg := <-w.out
	if msg.err != nil {
		return msg.err
	}
	r := m.(*pb.LeaseKeepAliveResponse)
	r.Header, r.ID, r.TTL = msg.resp.Header, msg.resp.ID, msg.resp.TTL
	return nil
}

// A renewal whose answer comes later than one renew interval (TTL/3), on
// a stream that keeps answering other leases, but well before the lease
// expires, confirms the renewal: the server answers a stream's requests
// in order, so on a busy stream the slow answer is the earliest one
// possible, and a retry would only queue behind it. Under load (100 leases
// on 8 streams, load average 7) answers took 2.0 s and more, and every
// renewal of a 6 s lease timed out at 2 s until the lease was lost.
func TestSlowKeepAliveAnswerConfirms(t *testing.T) {
	const ttl = 9 * time.Second // renew interval 3 s
	interval := ttl / 3
	e := newEnv(t)
	slow := &slowAnswers{delay: interval + time.Second}
	b := e.countedBackend(1, grpc.WithChainStreamInterceptor(slow.intercept))
	ctx := ctxFor(t, time.Minute)

	// Two grants whose leases share a keepalive stream (lease ID modulo
	// 8): at most 9 grants.
	bySlot := map[int64]driver.Grant{}
	var slowG, busyG driver.Grant
	for i := 0; busyG.Key == ""; i++ {
		if i == 9 {
			t.Fatal("9 grants on 9 different keepalive streams")
		}
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: fmt.Sprintf("slow-%d", i), Owner: fmt.Sprintf("owner-%d-0123456789", i), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		kvs := e.entries(g.Key)
		if len(kvs) != 1 {
			t.Fatalf("%d entries for %s", len(kvs), g.Key)
		}
		slot := kvs[0].Lease % 8
		if other, ok := bySlot[slot]; ok {
			slowG, busyG = other, g
			slow.id.Store(e.entries(other.Key)[0].Lease)
		}
		bySlot[slot] = g
	}

	// The other lease is renewed by hand every 200 ms on the same stream,
	// so the stream is never silent for a whole interval.
	bctx, stopBusy := context.WithCancel(ctx)
	var busyErr atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for bctx.Err() == nil {
			if _, err := b.Renew(bctx, busyG, ttl); err != nil && bctx.Err() == nil {
				busyErr.Store(err)
			}
			select {
			case <-bctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { stopBusy(); <-done }()

	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := b.KeepAlive(kctx, slowG)
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("keepalive channel closed")
		}
		if r.Err != nil {
			t.Fatalf("renewal answered after %v (renew interval %v, lease %v) counted as failed: %v", slow.delay, interval, ttl, r.Err)
		}
		lat := time.Since(r.Sent)
		if lat < slow.delay {
			t.Fatalf("renewal confirmed %v after its send, before its answer was let through (%v)", lat, slow.delay)
		}
		t.Logf("renewal confirmed %s after its send (interval %v, lease %v)", ms(lat), interval, ttl)
	case <-time.After(ttl):
		t.Fatalf("no renewal within the lease's TTL %v", ttl)
	}

	// The next renewal was sent as soon as that answer came (its interval
	// had passed) and waits 4 s for its own: deleting the key meanwhile is
	// still reported at once, by the shared watch, not after that answer.
	kvs := e.entries(slowG.Key)
	if len(kvs) != 1 {
		t.Fatalf("%d entries for %s", len(kvs), slowG.Key)
	}
	start := time.Now()
	if _, err := e.admin.Delete(ctx, string(kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	bound := interval // below the 4 s the pending answer takes
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatal("keepalive channel closed without reporting the deletion")
			}
			if !errors.Is(r.Err, driver.ErrNotHeld) {
				continue
			}
			t.Logf("deletion reported after %s, a renewal pending", ms(time.Since(start)))
		case <-time.After(bound - time.Since(start)):
			t.Fatalf("deleted key not reported within %v while a renewal waits for its answer", bound)
		}
		break
	}
	if err, _ := busyErr.Load().(error); err != nil {
		t.Errorf("renewal of the other lease on the stream: %v", err)
	}
}
