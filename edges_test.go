package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// appliedThenFailed is a backend whose first Acquire takes the key on the
// store and then reports a failure, as when the connection resets after
// the server applied the request: the outcome is unknown to the caller.
type appliedThenFailed struct {
	*memory.Backend
	mu     sync.Mutex
	failed bool
}

var errReset = errors.New("connection reset by peer")

func (b *appliedThenFailed) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && !b.failed {
		b.failed = true
		return driver.Grant{}, fmt.Errorf("fake: acquire: %w", errReset)
	}
	return g, err
}

// TestNoOrphanAfterUnknownOutcome: an attempt that may have taken the key
// (applied, then failed) is cleaned up on every exit of Acquire: when its
// context's deadline passes, when it is cancelled, and when the Locker is
// closed, all during the wait that follows the failure.
func TestNoOrphanAfterUnknownOutcome(t *testing.T) {
	cases := []struct {
		name string
		end  func(ctx context.Context, l *fencedlock.Locker) (context.Context, func())
		want error
	}{
		{"deadline", func(ctx context.Context, _ *fencedlock.Locker) (context.Context, func()) {
			return context.WithTimeout(ctx, time.Second)
		}, context.DeadlineExceeded},
		{"cancel", func(ctx context.Context, _ *fencedlock.Locker) (context.Context, func()) {
			ctx, cancel := context.WithCancel(ctx)
			t := time.AfterFunc(time.Second, cancel)
			return ctx, func() { t.Stop(); cancel() }
		}, context.Canceled},
		{"Close", func(ctx context.Context, l *fencedlock.Locker) (context.Context, func()) {
			t := time.AfterFunc(time.Second, func() { l.Close() })
			return ctx, func() { t.Stop() }
		}, fencedlock.ErrClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.NewStore()
				b := &appliedThenFailed{Backend: store.Backend()}
				defer b.Close()
				l := mustLocker(t, b, fencedlock.Options{TTL: time.Minute})
				defer l.Close()
				ctx, stop := c.end(t.Context(), l)
				defer stop()
				start := time.Now()
				_, err := l.Acquire(ctx, "k")
				if !errors.Is(err, c.want) {
					t.Fatalf("Acquire: %v, want %v", err, c.want)
				}
				if d := time.Since(start); d != time.Second {
					t.Fatalf("Acquire returned after %v, want 1s", d)
				}
				info, err := store.Backend().Inspect(t.Context(), "k")
				if err != nil {
					t.Fatal(err)
				}
				if info.Held {
					t.Fatalf("orphan lock: key held (TTL %v left) after Acquire gave up", info.TTL)
				}
			})
		})
	}
}

// TestPermanentErrors: an error no retry can fix ends Acquire at once, with
// the reason; a wait that ends on its context carries the last backend
// error; a renewal failing permanently loses the lease at once.
func TestPermanentErrors(t *testing.T) {
	// refusing returns a Locker (TTL 1s) on a fake whose every acquire
	// fails with err, and a context that ends 3s on; both end with t.
	refusing := func(t *testing.T, err error) (*fake, *fencedlock.Locker, context.Context) {
		f := newFake()
		f.acquireFn = func(context.Context, driver.AcquireRequest) (driver.Grant, error) {
			return driver.Grant{}, err
		}
		l := mustLocker(t, f, fencedlock.Options{TTL: time.Second})
		t.Cleanup(func() { l.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		t.Cleanup(cancel)
		return f, l, ctx
	}
	errPerm := fmt.Errorf("fake: lock key has no TTL: %w", fencedlock.ErrPermanent)
	t.Run("acquire", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, l, ctx := refusing(t, errPerm)
			start := time.Now()
			_, err := l.Acquire(ctx, "k")
			if !errors.Is(err, errPerm) || !errors.Is(err, fencedlock.ErrPermanent) {
				t.Fatalf("Acquire: %v, want the permanent error", err)
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("Acquire retried a permanent error for %v", d)
			}
			if n := len(f.acquires); n != 1 {
				t.Fatalf("%d attempts, want 1", n)
			}
		})
	})
	t.Run("wait carries the last error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			errDown := errors.New("connection refused")
			_, l, ctx := refusing(t, errDown)
			_, err := l.Acquire(ctx, "k")
			if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errDown) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired, DeadlineExceeded and the backend's error", err)
			}
		})
	})
	t.Run("renew", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			f.renewFn = func(context.Context, driver.Grant, time.Duration) (time.Duration, error) {
				return 0, errPerm
			}
			_, ls, start := acquire3s(t, f)
			<-ls.Done()
			if d := time.Since(start); d != time.Second {
				t.Fatalf("lost after %v, want 1s (the first renewal)", d)
			}
			if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.Is(err, errPerm) {
				t.Fatalf("Err %v", err)
			}
		})
	})
}

// TestRenewAfterLoss: a manual renewal whose reply comes after the lease
// was reported lost does not revive it: Renew fails with ErrLeaseLost, and
// the key, which the late renewal extended on the server, is released.
func TestRenewAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		f := &fake{Backend: store.Backend()}
		l := mustLocker(t, f, fencedlock.Options{TTL: 3 * time.Second, ManualRenew: true})
		defer l.Close()
		ls, err := l.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		// Sent at 2s, applied at 2.8s: after the local deadline (2.699s),
		// before the server's expiry (3s).
		f.renewFn = func(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
			time.Sleep(800 * time.Millisecond)
			return f.Backend.Renew(ctx, g, ttl)
		}
		time.Sleep(2 * time.Second)
		err = ls.Renew(t.Context())
		if !errors.Is(ls.Err(), fencedlock.ErrLeaseLost) {
			t.Fatalf("lease not lost at its deadline: %v", ls.Err())
		}
		if !errors.Is(err, fencedlock.ErrLeaseLost) {
			t.Fatalf("Renew after loss: %v, want ErrLeaseLost", err)
		}
		if info, _ := store.Backend().Inspect(t.Context(), "k"); info.Held {
			t.Fatalf("key held for %v more by a lease reported lost", info.TTL)
		}
		if err := ls.Renew(t.Context()); !errors.Is(err, fencedlock.ErrLeaseLost) {
			t.Fatalf("second Renew: %v, want ErrLeaseLost", err)
		}
	})
}

// TestLockersShareBackend: two Lockers over one Backend (two TTLs); closing
// one releases its leases and leaves the backend, which it did not create,
// to the other.
func TestLockersShareBackend(t *testing.T) {
	b := memory.New()
	defer b.Close()
	short := mustLocker(t, b, fencedlock.Options{TTL: time.Second})
	long := mustLocker(t, b, fencedlock.Options{TTL: time.Minute})
	defer long.Close()
	ls, err := short.TryAcquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := short.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ls.Err(), fencedlock.ErrReleased) {
		t.Fatalf("lease after its Locker's Close: %v", ls.Err())
	}
	ls2, err := long.TryAcquire(t.Context(), "b")
	if err != nil {
		t.Fatalf("the other Locker after one was closed: %v", err)
	}
	if err := ls2.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseBoundedWhenRenewalStuck: a renewal in flight that does not
// return when cancelled (a client dialling a new connection to a stopped
// server ignores cancellation) does not hold up Release or Close beyond
// ReleaseTimeout; the key is released all the same.
func TestReleaseBoundedWhenRenewalStuck(t *testing.T) {
	const releaseTimeout = 500 * time.Millisecond
	stuck := func(f *fake) {
		f.renewFn = func(context.Context, driver.Grant, time.Duration) (time.Duration, error) {
			time.Sleep(5 * time.Second) // ignores its context
			return 0, errors.New("dial timeout")
		}
	}
	t.Run("Release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			stuck(f)
			l := mustLocker(t, f, fencedlock.Options{TTL: 6 * time.Second, ReleaseTimeout: releaseTimeout})
			defer l.Close()
			ls, err := l.TryAcquire(t.Context(), "k")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2*time.Second + 200*time.Millisecond) // the renewal at 2s is stuck
			start := time.Now()
			if err := ls.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > releaseTimeout {
				t.Fatalf("Release took %v, want at most ReleaseTimeout %v", d, releaseTimeout)
			}
			if info, _ := f.Backend.Inspect(t.Context(), "k"); info.Held {
				t.Fatal("key still held after Release")
			}
			time.Sleep(5 * time.Second) // let the stuck renewal return
		})
	})
	t.Run("Close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			stuck(f)
			l := mustLocker(t, f, fencedlock.Options{TTL: 6 * time.Second, ReleaseTimeout: releaseTimeout})
			for _, k := range []string{"a", "b", "c"} {
				if _, err := l.TryAcquire(t.Context(), k); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2*time.Second + 200*time.Millisecond)
			start := time.Now()
			err := l.Close()
			if d := time.Since(start); d > releaseTimeout+50*time.Millisecond {
				t.Fatalf("Close took %v, want about ReleaseTimeout %v", d, releaseTimeout)
			}
			if err == nil {
				t.Fatal("Close reported nothing about the renewals still running")
			}
			for _, k := range []string{"a", "b", "c"} {
				if info, _ := f.Backend.Inspect(t.Context(), k); info.Held {
					t.Fatalf("%q still held after Close", k)
				}
			}
			time.Sleep(5 * time.Second) // let the stuck renewals return
		})
	})
}

// dialling is a backend whose Renew, like a rueidis request dialling a new
// connection to a stopped server, ignores its context for 5s, and whose
// Release waits behind that dial, ignoring its context too.
type dialling struct {
	*memory.Backend
	mu   sync.Mutex
	dial chan struct{} // closed when the dial ends
}

func (b *dialling) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	b.mu.Lock()
	b.dial = make(chan struct{})
	dial := b.dial
	b.mu.Unlock()
	time.Sleep(5 * time.Second)
	close(dial)
	return 0, errors.New("dial timeout")
}

func (b *dialling) Release(ctx context.Context, g driver.Grant) error {
	b.mu.Lock()
	dial := b.dial
	b.mu.Unlock()
	if dial != nil {
		<-dial
	}
	return b.Backend.Release(ctx, g)
}

// TestReleaseBoundedWhenBackendStuck: backend calls that do not return
// when their context ends (a Release held behind a renewal that is
// dialling) do not hold Lease.Release or Close past ReleaseTimeout plus
// 20ms; they report it.
func TestReleaseBoundedWhenBackendStuck(t *testing.T) {
	const releaseTimeout = 500 * time.Millisecond
	for _, via := range []string{"Release", "Close"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &dialling{Backend: memory.New()}
				l := mustLocker(t, b, fencedlock.Options{TTL: 6 * time.Second, ReleaseTimeout: releaseTimeout})
				ls, err := l.TryAcquire(t.Context(), "k")
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2*time.Second + 200*time.Millisecond) // the renewal at 2s is dialling
				start := time.Now()
				if via == "Release" {
					err = ls.Release(t.Context())
				} else {
					err = l.Close()
				}
				if d := time.Since(start); d > releaseTimeout+20*time.Millisecond {
					t.Fatalf("%s took %v, want at most ReleaseTimeout %v + 20ms", via, d, releaseTimeout)
				}
				if err == nil {
					t.Fatalf("%s reported success although the release did not get through", via)
				}
				l.Close()
				time.Sleep(5 * time.Second) // let the stuck calls return
			})
		})
	}
}

// slowRenew is a backend whose Renew ignores its context and answers
// after delay (with success or failure), like a client stuck dialling or a
// reply that arrives late.
type slowRenew struct {
	*memory.Backend
	delay time.Duration
	fail  bool
}

func (b *slowRenew) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	time.Sleep(b.delay)
	if b.fail {
		return 0, errors.New("dial timeout")
	}
	return b.Backend.Renew(context.Background(), g, ttl)
}

// TestLostAtDeadlineWhileRenewalStuck: the local deadline is kept even
// when the watchdog's renewal is stuck in a backend call that ignores its
// context: Done closes and Err reports the loss at the deadline itself,
// not when the call returns. A renewal that then succeeds late does not
// bring the lease back, and the key it extended is released.
func TestLostAtDeadlineWhileRenewalStuck(t *testing.T) {
	for _, fail := range []bool{true, false} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memory.New()
				b := &slowRenew{Backend: mem, delay: 5 * time.Second, fail: fail}
				_, ls, start := acquire3s(t, b)
				deadline := ls.Deadline()
				select {
				case <-ls.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("lease not reported lost")
				}
				if got, want := time.Since(start), deadline.Sub(start); got != want {
					t.Fatalf("lost at %v, want at the local deadline %v", got, want)
				}
				if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
					t.Fatalf("Err = %v, want ErrLeaseLost", err)
				}
				time.Sleep(5 * time.Second) // the stuck renewal returns
				synctest.Wait()
				if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
					t.Fatalf("after the late renewal: Err = %v, want ErrLeaseLost", err)
				}
				if info, err := mem.Inspect(t.Context(), "k"); err != nil || info.Held {
					t.Fatalf("key after a late renewal of a lost lease: %+v %v, want free", info, err)
				}
			})
		})
	}
}
