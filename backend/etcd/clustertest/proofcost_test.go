package clustertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
)

// proofCounter counts what a client sends for its held leases: keepalive
// requests (renewals), reads (Range) and watch progress requests.
type proofCounter struct {
	mu                        sync.Mutex
	renewals, reads, progress int
}

func (c *proofCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/Range") {
		c.mu.Lock()
		c.reads++
		c.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *proofCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return cs, err
	}
	return &countedStream{ClientStream: cs, c: c}, nil
}

// take returns and resets the counts.
func (c *proofCounter) take() (renewals, reads, progress int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	renewals, reads, progress = c.renewals, c.reads, c.progress
	c.renewals, c.reads, c.progress = 0, 0, 0
	return
}

type countedStream struct {
	grpc.ClientStream
	c *proofCounter
}

func (s *countedStream) SendMsg(m any) error {
	s.c.mu.Lock()
	switch r := m.(type) {
	case *pb.LeaseKeepAliveRequest:
		s.c.renewals++
	case *pb.WatchRequest:
		if r.GetProgressRequest() != nil {
			s.c.progress++
		}
	}
	s.c.mu.Unlock()
	return s.ClientStream.SendMsg(m)
}

// cpuTime is the CPU time (user + system) of this process so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The cost of proving that held keys are still ours at each renewal (see
// prove.go): with the deletion watch healthy it is a round per batch of
// renewals (one Range of a single key, count only, and one progress
// request on the watch, while other clients write), not a read per
// lease. Measured on a
// single-member etcd in a child process, so that the CPU time is the
// client's alone; held leases' renewals are counted at the client.
func TestProofCost(t *testing.T) {
	var pc proofCounter
	b, _, ep := childBackend(t, grpc.WithChainUnaryInterceptor(pc.unary), grpc.WithChainStreamInterceptor(pc.stream))
	const ttl = 3 * time.Second // renewed every second
	l := mustLocker(t, b, fencedlock.Options{TTL: ttl})
	defer l.Close()
	ctx := ctxFor(t, time.Minute)
	// Another client may write all along: the store's revision then
	// moves, and each round waits for the watch's progress (with no write
	// since the last progress notification, the revision it reads is
	// already covered). The CPU time is measured without it (its own
	// client runs in this process).
	writer, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	busy := func(hold time.Duration) {
		for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := writer.Put(ctx, "busy", "x"); err != nil {
				t.Fatal(err)
			}
		}
	}

	var held []*fencedlock.Lease
	for _, n := range []int{1, 100} {
		for i := len(held); i < n; i++ {
			ls, err := l.Acquire(ctx, fmt.Sprintf("cost-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ls)
		}
		time.Sleep(2 * ttl / 3) // the new leases settle into their batches
		for _, writes := range []bool{false, true} {
			const hold = 2 * ttl
			pc.take()
			cpu0 := cpuTime(t)
			if writes {
				busy(hold)
			} else {
				time.Sleep(hold)
			}
			cpu := cpuTime(t) - cpu0
			renewals, reads, progress := pc.take()
			for i, ls := range held {
				if err := ls.Err(); err != nil {
					t.Fatalf("%d leases: lease %d lost: %v", n, i, err)
				}
			}
			if renewals == 0 {
				t.Fatalf("%d leases: no renewal in %v", n, hold)
			}
			what := fmt.Sprintf("%d leases held %v (TTL %v), no other writes", n, hold, ttl)
			cpuNote := fmt.Sprintf("; client CPU %s (%.1f us per renewal)", ms(cpu), float64(cpu)/float64(time.Microsecond)/float64(renewals))
			if writes {
				what = fmt.Sprintf("%d leases held %v (TTL %v), another client writing every 10 ms", n, hold, ttl)
				cpuNote = ""
			}
			t.Logf("%s: %d renewals, %d reads and %d progress requests to prove the keys (%.3f reads, %.3f progress requests per renewal)%s",
				what, renewals, reads, progress, float64(reads)/float64(renewals), float64(progress)/float64(renewals), cpuNote)
			if n > 1 && reads >= renewals/2 {
				t.Errorf("%s: %d reads for %d renewals: the keys were proven one by one, not per batch", what, reads, renewals)
			}
		}
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
