package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// Releaser is what an Acquire returns (a *fencedlock.Lease, a multilock
// set's lease, a semaphore permit): it releases what it holds.
type Releaser interface {
	Release(context.Context) error
}

// AcquireThenRelease starts a goroutine that calls acquire (a waiting
// Acquire of a Locker, a multilock Locker, a semaphore) and, if it got
// something, releases it at once with ctx; the channel gets the error of
// either (nil if both worked).
func AcquireThenRelease[R Releaser](ctx context.Context, acquire func() (R, error)) <-chan error {
	got := make(chan error, 1)
	go func() {
		r, err := acquire()
		if err == nil {
			err = r.Release(ctx)
		}
		got <- err
	}()
	return got
}

// AcquireAsync starts a goroutine that waits for key with l; the channel
// gets the lease, or nil if Acquire failed (its error reported with
// t.Error).
func AcquireAsync(ctx context.Context, t testing.TB, l *fencedlock.Locker, key string) <-chan *fencedlock.Lease {
	got := make(chan *fencedlock.Lease, 1)
	go func() {
		ls, err := l.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	return got
}

// Woken sleeps settle (the time a waiter started with AcquireRelease or
// AcquireThenRelease needs to be watching), runs release, and waits up to
// within for the waiter's result on got: it fails t if release or the
// waiter failed, or (naming the waiter with what) if the waiter is not
// done by then. It returns how long after the release the waiter was
// done.
func Woken(t testing.TB, got <-chan error, settle, within time.Duration, release func() error, what string) time.Duration {
	t.Helper()
	time.Sleep(settle)
	released := time.Now()
	if err := release(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		return time.Since(released)
	case <-time.After(within):
		t.Fatalf("%s: not woken by the release within %v", what, within)
		return 0
	}
}

// Lost fails t, with the message why, unless ls's Done is closed within
// d.
func Lost(t testing.TB, ls *fencedlock.Lease, d time.Duration, why string) {
	t.Helper()
	select {
	case <-ls.Done():
	case <-time.After(d):
		t.Fatal(why)
	}
}
