package goredis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkBackendAcquireReleaseCancellable is BenchmarkBackendAcquireRelease
// with a context that can end, as the Locker's are: on a client without
// ContextTimeoutEnabled each command then waits for its reply or its
// context, whichever comes first (see Backend.process).
func BenchmarkBackendAcquireReleaseCancellable(b *testing.B) {
	srv := redistest.Start(b)
	be, _ := newBackend(b, srv, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := driver.AcquireRequest{Key: "bench", Owner: owner(), TTL: 10 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		g, err := be.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Release(ctx, g); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLostReplyWithWait: with WaitReplicas the script and WAIT go out as
// one pipeline; a pipeline whose reply was lost after the server ran the
// script is not sent again either (one EVALSHA on the server for an
// Acquire and for a Renew), and the error is the lost connection's, not
// ErrNotHeld or ErrNotAcquired. Each case has a client of its own: after
// a cut, the next one may hit the reply of the client's new connection
// instead of the script's.
func TestLostReplyWithWait(t *testing.T) {
	primary := redistest.Start(t)
	redistest.Start(t, redistest.WithReplicaOf(primary))
	p, err := faultproxy.New(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	admin, _ := newBackend(t, primary, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evalshas := func() int64 {
		var n int64
		for _, line := range strings.Split(admin.c.Info(ctx, "commandstats").Val(), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				n, _ = strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		op   func(b *Backend, g driver.Grant) error
	}{
		{"acquire", func(b *Backend, _ driver.Grant) error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "lost-acquire", Owner: owner(), TTL: time.Minute})
			return err
		}},
		{"renew", func(b *Backend, g driver.Grant) error { _, err := b.Renew(ctx, g, time.Minute); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			defer c.Close()
			b, err := New(c, Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// Load the scripts, and let the replica acknowledge.
			g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "warm-" + tc.name, Owner: owner(), TTL: time.Minute})
			if err != nil {
				t.Fatalf("warm-up acquire: %v", err)
			}
			if _, err := b.Renew(ctx, g, time.Minute); err != nil {
				t.Fatalf("warm-up renew: %v", err)
			}
			before, cuts := evalshas(), p.RepliesCut()
			p.CutReplies(1)
			err = tc.op(b, g)
			p.CutReplies(0)
			if p.RepliesCut() != cuts+1 {
				t.Fatalf("the proxy cut %d replies, want 1", p.RepliesCut()-cuts)
			}
			n := evalshas() - before
			t.Logf("%s, its pipeline's reply lost: %v; EVALSHA ran %d times", tc.name, err, n)
			if n != 1 {
				t.Errorf("EVALSHA ran %d times, want once: the pipeline was sent again after its reply was lost", n)
			}
			if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrNotAcquired) {
				t.Errorf("%v, want the unknown outcome of the lost reply", err)
			}
		})
	}
}
