package clustertest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/multilock"
)

// TestMultilockReplyLate: a set's Txn applied by the member whose reply
// comes back after the acquire's context ended (a faultproxy delays every
// reply): the acquire fails, no entry of the set is left in any key's
// queue and no lease carries one once it returns, and another owner
// takes the set at once with fences above the lost grant's. The
// scenarios (multilocktest.UnknownOutcomeLeavesNothing) lose replies in a
// wrapper above the client; this one loses them on the wire.
func TestMultilockReplyLate(t *testing.T) {
	e := newEnv(t)
	mem := e.clus.Members[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go mem.GRPCServer.Serve(ln) //nolint:errcheck // returns when the listener or the server closes
	t.Cleanup(func() { ln.Close() })
	px, err := faultproxy.New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", px.Addr())
	}
	opts := fencedlock.Options{TTL: 30 * time.Second, ReleaseTimeout: 10 * time.Second}
	m, err := multilock.New(e.countedBackend(0, grpc.WithContextDialer(dial)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	other, err := multilock.New(e.backend(1), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	ctx := context.Background()
	const delay = 400 * time.Millisecond
	applied := 0
	for i := range 4 {
		ks := []string{fmt.Sprintf("late%d/a", i), fmt.Sprintf("late%d/b", i)}
		if ls, err := m.TryAcquire(ctx, []string{"warm"}); err != nil { // the connection is up
			t.Fatal(err)
		} else if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, stopWatch := context.WithCancel(ctx)
		puts := e.admin.Watch(wctx, dir(ks[0]), clientv3.WithPrefix(), clientv3.WithFilterDelete())
		px.SetReplyLatency(delay)
		// The lease grant's reply comes back after delay; the Txn, sent
		// then, is applied at once and its reply comes back after the
		// context has ended.
		actx, cancel := context.WithTimeout(ctx, delay+delay/2)
		ls, err := m.TryAcquire(actx, ks)
		cancel()
		px.SetReplyLatency(0)
		if err == nil {
			t.Logf("round %d: granted (the machine was slow): %v", i, ls)
			ls.Release(ctx)
			stopWatch()
			continue
		}
		t.Logf("round %d: %v", i, err)
		for _, k := range ks {
			if n := len(e.entries(k)); n != 0 {
				t.Errorf("%q after the acquire whose reply came late: %d queue entries, want none", k, n)
			}
		}
		ols, err := other.TryAcquire(ctx, ks)
		if err != nil {
			t.Fatalf("another owner's TryAcquire after it: %v", err)
		}
		ols.Release(ctx)
		if lateTxnSeen(t, puts, int64(ols.Fences()[0])) {
			applied++
		}
		stopWatch()
	}
	t.Logf("%d of 4 late Txns had been applied", applied)
	if applied == 0 {
		t.Fatal("no Txn whose reply came late had been applied: the test tested nothing")
	}
}

// lateTxnSeen reads puts (a watch of PUTs in a key's queue, started
// before the late acquire) up to the PUT of the other owner's grant at
// revision fence, and reports whether an entry was created before it: the
// late Txn's.
func lateTxnSeen(t *testing.T, puts clientv3.WatchChan, fence int64) bool {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case resp, ok := <-puts:
			if !ok {
				t.Fatal("the watch of the queue ended")
			}
			for _, ev := range resp.Events {
				if ev.Kv.CreateRevision < fence {
					return true
				}
				if ev.Kv.CreateRevision == fence {
					return false
				}
			}
		case <-timeout:
			t.Fatal("the watch of the queue saw no PUT of the other owner's grant in 10s")
		}
	}
}
