package redisedge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// PausedReleaseTimeout is the Locker's ReleaseTimeout in PausedRelease.
const PausedReleaseTimeout = 500 * time.Millisecond

// pausedLimit is what PausedRelease allows a release or a close to take:
// a client's default read timeout (go-redis: 3 s), well above
// PausedReleaseTimeout (measured: 501 ms to 0.52 s, also with the machine
// loaded). A call that ends only at the client's own timeouts (go-redis
// with its defaults: 5.0 s) fails it, and its error does not wrap the
// context's.
const pausedLimit = 3 * time.Second

// PausedRelease checks that Release and Close are bounded by the Locker's
// ReleaseTimeout whatever the client's options (dial uses its defaults):
// with redis-server stopped (SIGSTOP), a Lease's Release and then the
// Locker's Close (which releases the other lease) each see the backend's
// Release return with its context's error (context.DeadlineExceeded)
// within pausedLimit of their start, while the server is still stopped.
// (The Locker itself stops waiting for a backend call shortly after its
// context ended; what is checked is that the backend's call ended too.)
func PausedRelease(t *testing.T, dial Dial) {
	srv := testserver.StartRedis(t, testserver.WithUser(Admin, AdminPassword))
	b := &releaseTimer{Backend: dial(t, srv.Addr, Admin, AdminPassword), ended: make(chan releaseEnd, 2)}
	l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second, ReleaseTimeout: PausedReleaseTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	ls, err := l.TryAcquire(ctx, "paused-release")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.TryAcquire(ctx, "paused-close")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	resume := sync.OnceFunc(srv.Resume)
	defer resume()
	bounded := func(what string, call func() error) {
		t.Helper()
		start := time.Now()
		err := call()
		t.Logf("%s with the server stopped: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
		var end releaseEnd
		select {
		case end = <-b.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the backend's Release has not returned 10 s later", what)
		}
		took := end.at.Sub(start)
		t.Logf("%s: the backend's Release returned %v after %v", what, end.err, took.Round(time.Millisecond))
		if !errors.Is(end.err, context.DeadlineExceeded) {
			t.Errorf("%s: the backend's Release returned %v, want its ReleaseTimeout's context.DeadlineExceeded", what, end.err)
		}
		if took > pausedLimit {
			t.Errorf("%s: the backend's Release returned %v after it began, with ReleaseTimeout %v: not bounded by it", what, took, PausedReleaseTimeout)
		}
	}
	bounded("Release", func() error { return ls.Release(context.Background()) })
	bounded("Close", l.Close) // releases other
	resume()
	if err := other.Release(ctx); !errors.Is(err, fencedlock.ErrReleased) {
		t.Errorf("Release after Close: %v, want ErrReleased (Close released it)", err)
	}
}

// releaseTimer is a backend that reports when each Release returns, and
// with what, on ended.
type releaseTimer struct {
	driver.Backend
	ended chan releaseEnd
}

type releaseEnd struct {
	at  time.Time
	err error
}

func (b *releaseTimer) Release(ctx context.Context, g driver.Grant) error {
	err := b.Backend.Release(ctx, g)
	b.ended <- releaseEnd{time.Now(), err}
	return err
}
