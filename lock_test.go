package fencedlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake wraps a memory backend with injectable faults and a call log, in
// the style of rueidis's function-field fakes.
type fake struct {
	*memory.Backend
	mu        sync.Mutex
	acquires  []time.Time
	renews    []time.Time
	releases  int
	acquireFn func(context.Context, driver.AcquireRequest) (driver.Grant, error)
	renewFn   func(context.Context, driver.Grant, time.Duration) (time.Duration, error)
}

func newFake() *fake { return &fake{Backend: memory.New()} }

func (f *fake) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	f.mu.Lock()
	f.acquires = append(f.acquires, time.Now())
	fn := f.acquireFn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, req)
	}
	return f.Backend.Acquire(ctx, req)
}

func (f *fake) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	f.mu.Lock()
	f.renews = append(f.renews, time.Now())
	fn := f.renewFn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, g, ttl)
	}
	return f.Backend.Renew(ctx, g, ttl)
}

func (f *fake) Release(ctx context.Context, g driver.Grant) error {
	f.mu.Lock()
	f.releases++
	f.mu.Unlock()
	return f.Backend.Release(ctx, g)
}

func (f *fake) renewTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.renews...)
}

// plain hides the optional interfaces of the wrapped backend.
type plain struct{ driver.Backend }

// TestRenewCadence: the watchdog renews every TTL/3, measured on the fake
// clock, and the lease survives ten TTLs.
func TestRenewCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		l, ls, start := acquire3s(t, f)
		time.Sleep(30*time.Second + time.Millisecond)
		synctest.Wait()
		if err := ls.Err(); err != nil {
			t.Fatalf("lease lost under a healthy holder: %v", err)
		}
		renews := f.renewTimes()
		if len(renews) != 30 {
			t.Fatalf("renewals in 30s at TTL 3s: got %d, want 30", len(renews))
		}
		for i, at := range renews {
			if want := time.Duration(i+1) * time.Second; at.Sub(start) != want {
				t.Fatalf("renewal %d at %v, want %v", i, at.Sub(start), want)
			}
		}
		if want := renews[len(renews)-1].Add(3*time.Second - l.Options().SafetyMargin); !ls.Deadline().Equal(want) {
			t.Fatalf("deadline %v, want last renewal + TTL - margin %v", ls.Deadline().Sub(start), want.Sub(start))
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		n := len(f.renewTimes())
		time.Sleep(10 * time.Second)
		if got := len(f.renewTimes()); got != n {
			t.Fatalf("watchdog renewed %d times after Release", got-n)
		}
	})
}

// TestLocalDeadline: when every renewal fails, the lease is lost exactly at
// acquire time + TTL - safety margin, strictly before the server expires
// the key, and the cause wraps ErrLeaseLost and the last renewal error.
func TestLocalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		errDown := errors.New("connection refused")
		f.renewFn = func(context.Context, driver.Grant, time.Duration) (time.Duration, error) {
			return 0, errDown
		}
		l, ls, start := acquire3s(t, f)
		<-ls.Done()
		lostAfter := time.Since(start)
		margin := l.Options().SafetyMargin
		if want := 3*time.Second - margin; lostAfter != want {
			t.Fatalf("lost after %v, want TTL - margin = %v", lostAfter, want)
		}
		cause := context.Cause(ls.Context())
		if !errors.Is(cause, fencedlock.ErrLeaseLost) || !errors.Is(cause, errDown) {
			t.Fatalf("cause %v: want ErrLeaseLost wrapping the renewal error", cause)
		}
		if !errors.Is(ls.Err(), fencedlock.ErrLeaseLost) {
			t.Fatalf("Err() = %v", ls.Err())
		}
		// The server still holds the key until TTL: nobody else is in yet.
		other := mustLocker(t, f.Backend, fencedlock.Options{TTL: 3 * time.Second})
		defer other.Close()
		if _, err := other.TryAcquire(t.Context(), "k"); !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("key free at local deadline: %v", err)
		}
		// Renewal retried after the first failure (1s), then every TTL/12.
		if n := len(f.renewTimes()); n < 3 {
			t.Fatalf("only %d renewal attempts before the deadline", n)
		}
		if err := ls.Release(t.Context()); !errors.Is(err, fencedlock.ErrNotHeld) {
			t.Fatalf("release after loss: %v, want ErrNotHeld", err)
		}
	})
}

// TestLostOnNotHeld: a renewal that finds another owner loses the lease at
// once, at the first renewal (TTL/3), not at the deadline.
func TestLostOnNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		_, ls, start := acquire3s(t, store.Backend())
		store.Invalidate("k")
		<-ls.Done()
		if got := time.Since(start); got != time.Second {
			t.Fatalf("lost after %v, want 1s (first renewal)", got)
		}
		if cause := context.Cause(ls.Context()); !errors.Is(cause, fencedlock.ErrLeaseLost) || !errors.Is(cause, fencedlock.ErrNotHeld) {
			t.Fatalf("cause %v", cause)
		}
	})
}

// TestTransientRenewFailure: one failed renewal is retried, and the lease
// survives when a retry succeeds before the deadline.
func TestTransientRenewFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		var fails atomic.Int32
		f.renewFn = func(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
			if fails.Add(1) <= 2 {
				return 0, errors.New("timeout")
			}
			return f.Backend.Renew(ctx, g, ttl)
		}
		_, ls, _ := acquire3s(t, f)
		time.Sleep(10 * time.Second)
		if err := ls.Err(); err != nil {
			t.Fatalf("lease lost after two transient failures: %v", err)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBackoffBounds: a waiter without notifications or hints backs off
// exponentially with jitter, within [MinRetryDelay/2, MaxRetryDelay].
func TestBackoffBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.acquireFn = func(context.Context, driver.AcquireRequest) (driver.Grant, error) {
			return driver.Grant{}, &fencedlock.HeldError{Key: "k"} // no hint
		}
		minD, maxD := 10*time.Millisecond, 200*time.Millisecond
		l := mustLocker(t, plain{f}, fencedlock.Options{TTL: time.Second, MinRetryDelay: minD, MaxRetryDelay: maxD})
		defer l.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := l.Acquire(ctx, "k")
		if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v: want ErrNotAcquired and DeadlineExceeded", err)
		}
		f.mu.Lock()
		at := append([]time.Time(nil), f.acquires...)
		f.mu.Unlock()
		want := minD
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			if gap < want/2 || gap > want {
				t.Fatalf("gap %d = %v, want within [%v, %v]", i, gap, want/2, want)
			}
			want = min(2*want, maxD)
		}
		// 5s at up to 200ms per attempt: at least 25, at most ~55 attempts.
		if len(at) < 25 || len(at) > 60 {
			t.Fatalf("%d attempts in 5s", len(at))
		}
	})
}

// TestWaitHonoursHint: a waiter with a RetryAfter hint shorter than its
// backoff retries right after the hint.
func TestWaitHonoursHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		holder := mustLocker(t, plain{f.Backend}, fencedlock.Options{TTL: 2 * time.Second, ManualRenew: true})
		defer holder.Close()
		if _, err := holder.TryAcquire(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		waiter := mustLocker(t, plain{f}, fencedlock.Options{TTL: time.Second, MinRetryDelay: 5 * time.Second, MaxRetryDelay: 5 * time.Second})
		defer waiter.Close()
		start := time.Now()
		ls, err := waiter.Acquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		// The holder's lease expires at 2s on the server; the waiter is
		// in at 2s + 1ms, not at its 2.5-5s backoff.
		if got := time.Since(start); got != 2*time.Second+time.Millisecond {
			t.Fatalf("acquired after %v, want 2.001s", got)
		}
		if ls.Fence() != 2 {
			t.Fatalf("fence %d, want 2", ls.Fence())
		}
	})
}

// handoff runs inside a synctest bubble: a holds "k", b waits in Acquire
// for wait of fake time, then a releases. It returns how much fake time b
// took to get the key after the release.
func handoff(t *testing.T, a, b *fencedlock.Locker, wait time.Duration) time.Duration {
	t.Helper()
	held, err := a.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time)
	go func() {
		ls, err := b.Acquire(t.Context(), "k")
		if err != nil {
			t.Error(err)
		} else {
			defer ls.Release(t.Context())
		}
		got <- time.Now()
	}()
	time.Sleep(wait)
	synctest.Wait()
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return (<-got).Sub(released)
}

// TestNotifiedWaiter: with a Notifier, a release hands the lock over at
// once (zero fake time), however long the holder's TTL.
func TestNotifiedWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := twoLockers(t, time.Minute)
		if d := handoff(t, a, b, 5*time.Second); d != 0 {
			t.Fatalf("hand-off took %v of fake time, want 0", d)
		}
	})
}

// TestCancelledWait: a cancelled wait is both ErrNotAcquired and the
// context's error, returns at once, and the lease a waiting Acquire would
// get does not outlive the wait's context otherwise.
func TestCancelledWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := twoLockers(t, time.Minute)
		if _, err := a.TryAcquire(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err := b.Acquire(ctx, "k")
		if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v: want ErrNotAcquired and context.Canceled", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("returned after %v, want 1s", d)
		}
		// A lease acquired with a short wait context outlives that context.
		wctx, wcancel := context.WithTimeout(t.Context(), time.Second)
		ls, err := b.Acquire(wctx, "other")
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		if err := ls.Err(); err != nil {
			t.Fatalf("lease ended with its wait context: %v", err)
		}
	})
}

// TestInvalidInput: bad keys are refused by every call, and bad options
// and a nil backend by New, with ErrInvalid, before anything reaches the
// backend.
func TestInvalidInput(t *testing.T) {
	f := newFake()
	long := string(make([]byte, fencedlock.MaxKeyLen+1))
	keys := []struct {
		name string
		key  string
	}{
		{"empty key", ""},
		{"key over MaxKeyLen", long},
		{"1 MiB key", string(make([]byte, 1<<20))},
	}
	for _, c := range keys {
		t.Run(c.name, func(t *testing.T) {
			l := mustLocker(t, f, fencedlock.Options{})
			defer l.Close()
			if _, err := l.TryAcquire(t.Context(), c.key); !errors.Is(err, fencedlock.ErrInvalid) {
				t.Errorf("TryAcquire: %v, want ErrInvalid", err)
			}
			if _, err := l.Acquire(t.Context(), c.key); !errors.Is(err, fencedlock.ErrInvalid) {
				t.Errorf("Acquire: %v, want ErrInvalid", err)
			}
			err := l.Do(t.Context(), c.key, func(context.Context, *fencedlock.Lease) error { return nil })
			if !errors.Is(err, fencedlock.ErrInvalid) {
				t.Errorf("Do: %v, want ErrInvalid", err)
			}
		})
	}
	options := []struct {
		name string
		b    driver.Backend
		opts fencedlock.Options
	}{
		{"TTL 1ms", f, fencedlock.Options{TTL: time.Millisecond}},
		{"TTL 10ms", f, fencedlock.Options{TTL: 10 * time.Millisecond}},
		{"negative TTL", f, fencedlock.Options{TTL: -time.Second}},
		{"TTL over MaxTTL", f, fencedlock.Options{TTL: fencedlock.MaxTTL + 1}},
		{"renew interval beyond TTL", f, fencedlock.Options{TTL: time.Second, RenewInterval: time.Second}},
		{"negative renew interval", f, fencedlock.Options{TTL: time.Second, RenewInterval: -time.Second}},
		{"safety margin half TTL", f, fencedlock.Options{TTL: time.Second, SafetyMargin: 500 * time.Millisecond}},
		{"renew interval past TTL-SafetyMargin", f, fencedlock.Options{TTL: time.Second, SafetyMargin: 300 * time.Millisecond, RenewInterval: 700 * time.Millisecond}},
		{"retry delays inverted", f, fencedlock.Options{MinRetryDelay: time.Second, MaxRetryDelay: time.Millisecond}},
		{"negative release timeout", f, fencedlock.Options{ReleaseTimeout: -time.Second}},
		{"nil backend", nil, fencedlock.Options{}},
	}
	for _, c := range options {
		t.Run(c.name, func(t *testing.T) {
			l, err := fencedlock.New(c.b, c.opts)
			if !errors.Is(err, fencedlock.ErrInvalid) || l != nil {
				t.Errorf("New: %v, %v; want nil, ErrInvalid", l, err)
			}
		})
	}
	if n := len(f.acquires); n != 0 {
		t.Fatalf("%d invalid requests reached the backend", n)
	}
	if l := mustLocker(t, f, fencedlock.Options{}); l.Options().TTL != fencedlock.DefaultTTL ||
		l.Options().RenewInterval != fencedlock.DefaultTTL/3 {
		t.Fatalf("defaults not applied: %+v", l.Options())
	}
}

// TestReleaseSemantics: Release works with a cancelled context, is
// idempotent (the second call returns ErrNotHeld and sends nothing), and
// a lease's context carries ErrReleased afterwards.
func TestReleaseSemantics(t *testing.T) {
	f := newFake()
	l := mustLocker(t, f, fencedlock.Options{TTL: time.Second})
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := ls.Release(cancelled); err != nil {
		t.Fatalf("release with a cancelled context: %v", err)
	}
	if cause := context.Cause(ls.Context()); !errors.Is(cause, fencedlock.ErrReleased) {
		t.Fatalf("cause %v, want ErrReleased", cause)
	}
	if !errors.Is(ls.Err(), fencedlock.ErrReleased) {
		t.Fatalf("Err %v", ls.Err())
	}
	if err := ls.Release(t.Context()); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	if f.releases != 1 {
		t.Fatalf("%d releases sent, want 1", f.releases)
	}
	if err := ls.Renew(t.Context()); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("renew after release: %v", err)
	}
	// The key is free.
	if ls2, err := l.TryAcquire(t.Context(), "k"); err != nil || ls2.Fence() != 2 {
		t.Fatalf("reacquire: %v (fence %v)", err, ls2)
	}
}

// TestCloseReleasesAndStops: Close releases held leases, wakes waiting
// Acquires with ErrClosed, and later calls fail with ErrClosed.
func TestCloseReleasesAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		l := mustLocker(t, store.Backend(), fencedlock.Options{TTL: time.Minute})
		other := mustLocker(t, store.Backend(), fencedlock.Options{TTL: time.Minute})
		defer other.Close()
		ls, err := l.TryAcquire(t.Context(), "held")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryAcquire(t.Context(), "busy"); err != nil {
			t.Fatal(err)
		}
		waitErr := make(chan error)
		go func() {
			_, err := l.Acquire(t.Context(), "busy")
			waitErr <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-waitErr; !errors.Is(err, fencedlock.ErrClosed) {
			t.Fatalf("waiting Acquire: %v, want ErrClosed", err)
		}
		if !errors.Is(ls.Err(), fencedlock.ErrReleased) {
			t.Fatalf("held lease after Close: %v", ls.Err())
		}
		if _, err := other.TryAcquire(t.Context(), "held"); err != nil {
			t.Fatalf("Close did not release: %v", err)
		}
		if _, err := l.TryAcquire(t.Context(), "x"); !errors.Is(err, fencedlock.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// TestDoCancelsOnLoss: Do's function sees its context end when the lease is
// lost, and Do reports ErrLeaseLost whatever the function returned: nil, or
// its context's error (then joined with it).
func TestDoCancelsOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		l := mustLocker(t, store.Backend(), fencedlock.Options{TTL: 3 * time.Second})
		defer l.Close()
		for _, fnErr := range []bool{false, true} {
			err := l.Do(t.Context(), "k", func(ctx context.Context, ls *fencedlock.Lease) error {
				store.Invalidate("k")
				<-ctx.Done()
				if !errors.Is(context.Cause(ctx), fencedlock.ErrLeaseLost) {
					t.Errorf("fn cause %v", context.Cause(ctx))
				}
				if fnErr {
					return ctx.Err()
				}
				return nil
			})
			if !errors.Is(err, fencedlock.ErrLeaseLost) {
				t.Fatalf("Do (fn returned its context's error: %v): %v, want ErrLeaseLost", fnErr, err)
			}
			if fnErr && !errors.Is(err, context.Canceled) {
				t.Fatalf("Do: %v, want ErrLeaseLost joined with fn's context.Canceled", err)
			}
		}
		// And a plain Do succeeds and releases.
		fnErr := errors.New("boom")
		if err := l.Do(t.Context(), "k", func(context.Context, *fencedlock.Lease) error { return fnErr }); err != fnErr {
			t.Fatalf("Do: %v, want fn's error", err)
		}
		if _, err := l.TryAcquire(t.Context(), "k"); err != nil {
			t.Fatalf("Do did not release: %v", err)
		}
	})
}

// TestManualRenew: with ManualRenew the watchdog sends nothing, Renew moves
// the deadline, and without it the lease is lost at the deadline.
func TestManualRenew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		l := mustLocker(t, f, fencedlock.Options{TTL: 3 * time.Second, ManualRenew: true})
		defer l.Close()
		start := time.Now()
		ls, err := l.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := ls.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-ls.Done()
		if got, want := time.Since(start), 5*time.Second-l.Options().SafetyMargin; got != want {
			t.Fatalf("lost after %v, want %v", got, want)
		}
		if n := len(f.renewTimes()); n != 1 {
			t.Fatalf("%d renewals, want the 1 manual one", n)
		}
	})
}

// TestRealTime: a short real-time run on the real clock: a 500ms lease is
// kept for 1s (six renewals) by the watchdog, and a second locker gets the
// key only after release, with a greater fence.
//
// The TTL is sized by measurement: with a 100ms lease (renewal every 33ms,
// deadline 89ms after a renewal is sent) this test lost its lease in 7 of
// 160 runs under -race on 2 cores at load average 9-12, where the gap
// between renewals reached 86ms (2.6x the interval). A 500ms lease
// tolerates 283ms of lateness (deadline 449ms minus interval 166ms), over
// 5x the measured gap.
func TestRealTime(t *testing.T) {
	const ttl = 500 * time.Millisecond
	a, b := twoLockers(t, ttl)
	ls, err := a.TryAcquire(t.Context(), "rt")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if err := ls.Err(); err != nil {
		t.Fatalf("lost: %v", err)
	}
	if _, err := b.TryAcquire(t.Context(), "rt"); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("second locker: %v", err)
	}
	got := locktest.AcquireAsync(t.Context(), t, b, "rt")
	if err := ls.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil || l2.Fence() <= ls.Fence() {
		t.Fatalf("fence did not increase: %v then %v", ls.Fence(), l2)
	}
}

// silent is a Notifier that never delivers, like a pub/sub connection that
// dropped its messages.
type silent struct{ driver.Backend }

func (silent) Watch(context.Context, string) (<-chan struct{}, func(), error) {
	return make(chan struct{}), func() {}, nil
}

// TestLostNotificationBounded: when a release notification is lost, a
// waiter still gets the key within MaxRetryDelay, not after the holder's
// whole TTL.
func TestLostNotificationBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		a := mustLocker(t, store.Backend(), fencedlock.Options{TTL: time.Hour})
		b := mustLocker(t, silent{store.Backend()}, fencedlock.Options{TTL: time.Hour, MaxRetryDelay: 2 * time.Second})
		defer a.Close()
		defer b.Close()
		if d := handoff(t, a, b, 10*time.Second); d > 2*time.Second {
			t.Fatalf("waiter took %v after a silent release, want <= MaxRetryDelay 2s", d)
		}
	})
}

// acquire3s takes "k" with a new Locker on b (TTL 3s: a renewal every
// second, closed when the test ends) and returns the Locker, the lease and
// the time just before the acquire.
func acquire3s(t *testing.T, b driver.Backend) (*fencedlock.Locker, *fencedlock.Lease, time.Time) {
	t.Helper()
	l := mustLocker(t, b, fencedlock.Options{TTL: 3 * time.Second})
	t.Cleanup(func() { l.Close() })
	start := time.Now()
	ls, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	return l, ls, start
}

// twoLockers returns two Lockers with a TTL of ttl on one memory store, as
// two processes on one server, closed when the test ends.
func twoLockers(t *testing.T, ttl time.Duration) (a, b *fencedlock.Locker) {
	t.Helper()
	store := memory.NewStore()
	a = mustLocker(t, store.Backend(), fencedlock.Options{TTL: ttl})
	t.Cleanup(func() { a.Close() })
	b = mustLocker(t, store.Backend(), fencedlock.Options{TTL: ttl})
	t.Cleanup(func() { b.Close() })
	return a, b
}
