package redis

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// TestReleaseNotFailedByAnotherCallersDial: rueidis dials (and says HELLO on) a pipeline
// connection lazily (after a connection dropped, and for its multiplexed
// connections at their first use) with the context of the command that
// needs it first, and gives that dial's error to every command waiting for
// the same connection. A Release with a live context (the Locker's
// clean-up after an acquire of unknown outcome, with its own
// ReleaseTimeout) then fails with "dial tcp ...: operation was canceled"
// because another caller's context ended, and the lock that acquire took
// stays held by a token nobody has for its whole TTL
// (TestCancelledAcquiresLeaveNoOrphan hits it: "could not remove a lock a
// failed attempt may have taken ... dial tcp ...: operation was canceled").
// A Release whose own context is live must not fail for that.
//
// Deterministic: one pipeline connection (PipelineMultiplex -1), killed
// (CLIENT KILL); a caller whose context is then cancelled starts the
// redial, held by the dialer until that context ends; the Release waits
// for the same dial.
func TestReleaseNotFailedByAnotherCallersDial(t *testing.T) {
	for _, tc := range []struct {
		name string
		// op runs on the held grant g with a live context; check looks
		// at the lock afterwards.
		op    func(ctx context.Context, b *Backend, g driver.Grant) error
		check func(info driver.Info) bool
		want  string
	}{
		{"Release", func(ctx context.Context, b *Backend, g driver.Grant) error { return b.Release(ctx, g) },
			func(info driver.Info) bool { return !info.Held }, "free"},
		// A renewal failed this way loses a healthy lease.
		{"Renew", func(ctx context.Context, b *Backend, g driver.Grant) error {
			_, err := b.Renew(ctx, g, 10*time.Minute)
			return err
		}, func(info driver.Info) bool { return info.Held && info.TTL > time.Minute }, "held, renewed to 10m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sharedDial(t, tc.op, tc.check, tc.want)
		})
	}
}

func sharedDial(t *testing.T, op func(ctx context.Context, b *Backend, g driver.Grant) error, check func(driver.Info) bool, want string) {
	srv := testserver.StartRedis(t)
	var dials atomic.Int32
	entered := make(chan struct{}, 1)
	c := srv.Client(t, func(o *rueidis.ClientOption) {
		o.PipelineMultiplex = -1
		o.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			// The second dial (the first redial) waits for its caller's
			// context to end; the others dial at once.
			if dials.Add(1) == 2 {
				entered <- struct{}{}
				<-ctx.Done()
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
			}
			return d.DialContext(ctx, "tcp", dst)
		}
	})
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CLI(t, "CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err)
	}
	// A caller whose context ends while its command waits for the redial.
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan struct{})
	go func() {
		defer close(adone)
		for range 1000 { // until a command of actx starts the redial
			if actx.Err() != nil {
				return
			}
			_, _ = b.Inspect(actx, "other")
		}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no redial within 20s")
	}
	rerr := make(chan error, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		rerr <- op(rctx, b, g)
	}()
	// Let the operation reach the dial in progress (if it does not, it
	// dials on its own and the test passes without showing anything).
	time.Sleep(200 * time.Millisecond)
	acancel()
	<-adone
	if err := <-rerr; err != nil {
		t.Errorf("a call with a live context failed because another caller's context ended: %v", err)
	}
	if info, err := b.Inspect(ctx, "k"); err != nil || !check(info) {
		t.Errorf("afterwards: %+v, %v; want %s", info, err, want)
	}
	t.Logf("%d dials", dials.Load())
}
