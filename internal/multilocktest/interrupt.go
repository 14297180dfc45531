package multilocktest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/multilock"
)

// CancelledLeavesNothing: an Acquire of a set whose context ends at any
// point (before the send, while the request is on its way, while its
// reply is) returns either a lease or an error wrapping ErrNotAcquired,
// and in the second case no key of the set is held when it returns.
// Real backend, no fault injected: 100 deadlines (at most 20s) drawn
// in [0, twice the fastest of 5 warm round trips].
func CancelledLeavesNothing(t *testing.T, s Setup) {
	b := s.New(t)
	m := newLocker(t, b)
	ks := keys(t, 3)
	ctx := context.Background()
	start := time.Now()
	rtt := time.Hour // the fastest of 5 acquires, warm
	for range 5 {
		sent := time.Now()
		ls, err := m.TryAcquire(ctx, ks)
		if err != nil {
			t.Fatal(err)
		}
		rtt = min(rtt, time.Since(sent))
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	taken, refused := 0, 0
	for i := 0; i < 100 && time.Since(start) < 20*time.Second; i++ {
		cctx, cancel := context.WithTimeout(ctx, rand.N(2*rtt+time.Microsecond))
		ls, err := m.Acquire(cctx, ks)
		cancel()
		if err == nil {
			taken++
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("attempt %d: release: %v", i, err)
			}
			continue
		}
		refused++
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("attempt %d: %v, want ErrNotAcquired", i, err)
		}
		for _, k := range ks {
			if info, err := b.Inspect(ctx, k); err != nil || info.Held {
				t.Fatalf("attempt %d ended by its context (%v): %q held %v (err %v), want free", i, err, k, info.Held, err)
			}
		}
	}
	t.Logf("round trip %v: %d taken, %d ended by their context", rtt, taken, refused)
}

// CloseReleasesAndEndsWaiters: Close of the Locker ends a waiting Acquire
// of a set with an error wrapping ErrClosed, and Close of the holder's
// Locker releases its set: every key is free when Close returns.
func CloseReleasesAndEndsWaiters(t *testing.T, s Setup) {
	b := s.New(t)
	holder, err := multilock.New(b, opts())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter := newLocker(t, s.New(t))
	ks := keys(t, 3)
	ctx := context.Background()
	ls, err := holder.Acquire(ctx, ks)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, ks[1:])
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the waiter is waiting (or about to)
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, fencedlock.ErrClosed) {
			t.Errorf("waiting Acquire after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Acquire still waits 10s after its Locker's Close")
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	held(t, b, false, ks...)
	if !errors.Is(ls.Err(), fencedlock.ErrReleased) {
		t.Errorf("Err after Close = %v, want ErrReleased", ls.Err())
	}
}

// DoLostKey: a key of the set deleted while Do's fn runs ends fn's
// context with the loss, and Do's error wraps ErrLeaseLost and names the
// key.
func DoLostKey(t *testing.T, s Setup) {
	m := newLocker(t, s.New(t))
	ks := keys(t, 3)
	var cause error
	err := m.Do(context.Background(), ks, func(ctx context.Context, _ *multilock.Lease) error {
		s.Delete(t, ks[2])
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(10 * time.Second):
			t.Error("fn's context still live 10s after a key of the set was deleted")
		}
		return nil
	}, fencedlock.WithTTL(600*time.Millisecond))
	var lk *driver.LostKeyError
	if !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.As(err, &lk) || lk.Key != ks[2] {
		t.Errorf("Do: %v, want ErrLeaseLost naming %q", err, ks[2])
	}
	if !errors.Is(cause, fencedlock.ErrLeaseLost) {
		t.Errorf("fn's context ended with %v, want ErrLeaseLost", cause)
	}
}
