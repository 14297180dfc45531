package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/hostiletest"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// TestCancelledAcquiresLeaveNoOrphan: the hostile schedule of
// backend/goredis's test of the same name, on rueidis, which pipelines
// every concurrent command and returns on a context while still writing a
// queued command: 64 goroutines call Acquire and TryAcquire with contexts
// that end at random points (already ended, after a few microseconds while
// the command is queued or its reply in flight, after some milliseconds,
// or cancelled from another goroutine) while the server stalls now and
// then (CLIENT PAUSE WRITE). After every call has returned, every key is
// free or held by a Lease the test got back: no lock is held by an owner
// token nobody has, neither at once nor after the queued requests have had
// time to arrive. No goroutine is left behind and the client still works.
// The seed is logged; FENCEDLOCK_SEED repeats it.
//
// rueidis dials a connection, and says HELLO on it, with the context of
// the command that needs it first, and fails every command waiting for it
// with that error (TestReleaseNotFailedByAnotherCallersDial): a clean-up
// release (or a Lease's Release with context.Background) then fails with
// "context canceled" because another caller's context ended, and its lock
// stays held for its TTL. rueidis dials its pipeline connections lazily,
// at their first use, and again after one closed (it closes one when a
// lone command's context deadline passes while it waits for the reply).
// The subtest "warm" first makes the client dial all 4 of them (a
// Background context, counted by the dialer): it passed 8 runs of 8, with
// 1 to 4 redials each; "cold" (a fresh client) failed in 2 runs of 3 to 8.
// The backend runs such a command again (conn.eval, see foreignCancel): both pass.
func TestCancelledAcquiresLeaveNoOrphan(t *testing.T) {
	for _, tc := range []struct {
		name string
		warm bool
	}{{"warm", true}, {"cold", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			pauser := srv.Client(t, nil) // its own connection: not one the workers' contexts dial
			base := runtime.NumGoroutine()
			var dials atomic.Int32
			c := srv.Client(t, func(o *rueidis.ClientOption) {
				o.PipelineMultiplex = 2 // 4 pipeline connections
				o.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, "tcp", dst)
				}
			})
			if tc.warm {
				for i := 0; dials.Load() < 4; i++ {
					if i == 1000 {
						t.Fatalf("%d dials after %d commands, want 4", dials.Load(), i)
					}
					if err := c.Do(context.Background(), c.B().Get().Key(strconv.Itoa(i)).Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
						t.Fatal(err)
					}
				}
			}
			b, err := New(c, Options{})
			if err != nil {
				t.Fatal(err)
			}
			l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err != nil {
				t.Fatal(err)
			}
			hostiletest.Cancels(t, l, b.Inspect, func(ms int) error {
				return pauser.Do(context.Background(), pauser.B().Arbitrary("CLIENT", "PAUSE", strconv.Itoa(ms), "WRITE").Build()).Error()
			})
			var abandoned int64
			for i := range 16 {
				n, err := c.Do(context.Background(), c.B().Arbitrary("EXISTS", b.LockKey(fmt.Sprintf("hostile/%d", i))+redisnames.AbandonedSuffix).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				abandoned += n
			}
			t.Logf("%d of 16 keys have abandon marks (clean-ups of an acquire of unknown outcome); %d dials", abandoned, dials.Load())
			if abandoned == 0 {
				t.Error("no clean-up left an abandon mark: the test did not exercise them")
			}
			l.Close()
			b.Close()
			c.Close()
			hostiletest.CheckGoroutines(t, base)
		})
	}
}
