package fencedlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// lateReplies is a memory backend whose Acquire replies lag after the
// store applied the request (the reply is slow, the request was not): the
// key is taken at once and its TTL runs while the reply travels.
type lateReplies struct {
	*memory.Backend
	lag      atomic.Int64 // time.Duration
	releases atomic.Int64
}

func (b *lateReplies) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	time.Sleep(time.Duration(b.lag.Load()))
	return g, err
}

func (b *lateReplies) Release(ctx context.Context, g driver.Grant) error {
	b.releases.Add(1)
	return b.Backend.Release(ctx, g)
}

// lateQueue is lateReplies as a driver.WaitAcquirer: AcquireWait takes the
// key when it is free (polling the store every 10ms) and then replies
// late, as a server queue whose grant's reply is slow.
type lateQueue struct{ *lateReplies }

func (q lateQueue) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	for {
		g, err := q.Backend.Acquire(ctx, req)
		if err == nil {
			time.Sleep(time.Duration(q.lag.Load()))
			return g, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// lateAndDirect returns a memory store and two Lockers on it, closed when the
// test ends: la (TTL 200ms) whose replies lag 350ms, and lb (TTL ttlB)
// without lag.
func lateAndDirect(t *testing.T, ttlB time.Duration) (store *memory.Store, la, lb *fencedlock.Locker) {
	t.Helper()
	store = memory.NewStore()
	a := &lateReplies{Backend: store.Backend()}
	a.lag.Store(int64(350 * time.Millisecond))
	la = mustLocker(t, a, fencedlock.Options{TTL: 200 * time.Millisecond})
	t.Cleanup(func() { la.Close() })
	lb = mustLocker(t, store.Backend(), fencedlock.Options{TTL: ttlB})
	t.Cleanup(func() { lb.Close() })
	return store, la, lb
}

// TestLateGrantRefused (issue 28 item 1): a grant whose reply comes back
// when less than the safety margin is left before the lease's local
// deadline is not handed out. The case: TTL 200ms, the reply lags
// 350ms; B takes the key at 250ms (the server expired A's at 200ms); A's
// TryAcquire must not return a lease at 350ms, and its release of the
// refused grant (owner-checked) must leave B's lock alone.
func TestLateGrantRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, la, lb := lateAndDirect(t, 200*time.Millisecond)

		start := time.Now()
		type result struct {
			ls  *fencedlock.Lease
			err error
			at  time.Duration
		}
		ach := make(chan result, 1)
		go func() {
			ls, err := la.TryAcquire(t.Context(), "k")
			ach <- result{ls, err, time.Since(start)}
		}()
		time.Sleep(250 * time.Millisecond)
		lsB, err := lb.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatalf("B: TryAcquire at 250ms: %v", err)
		}
		r := <-ach
		if r.err == nil {
			t.Fatalf("A: TryAcquire returned at %v a lease (fence %d, deadline %v ago, Err %v); B holds fence %d since 250ms",
				r.at, r.ls.Fence(), time.Since(r.ls.Deadline()), r.ls.Err(), lsB.Fence())
		}
		if !errors.Is(r.err, fencedlock.ErrNotAcquired) || !errors.Is(r.err, fencedlock.ErrLateGrant) {
			t.Fatalf("A: TryAcquire: %v, want ErrNotAcquired and ErrLateGrant", r.err)
		}
		t.Logf("A: TryAcquire returned at %v: %v", r.at, r.err)
		if err := lsB.Err(); err != nil {
			t.Fatalf("B's lease after A's refusal: %v", err)
		}
		info, err := store.Backend().Inspect(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Fence != lsB.Fence() {
			t.Fatalf("after A's refusal the key is %+v, want held by B (fence %d)", info, lsB.Fence())
		}
		if err := lsB.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLateGrantRenewedAtOnce: a grant handed out after its renewal time
// (the reply came 799ms into a 1s lease, renewal every third) is renewed
// by the watchdog at once, not at the next interval: its deadline moves
// from the grant's (900ms after the send) to the renewal's (900ms after
// 799ms).
func TestLateGrantRenewedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		a := &lateReplies{Backend: store.Backend()}
		a.lag.Store(int64(799 * time.Millisecond))
		l := mustLocker(t, a, fencedlock.Options{TTL: time.Second, SafetyMargin: 100 * time.Millisecond})
		defer l.Close()
		start := time.Now()
		ls, err := l.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the watchdog has run and is waiting again
		if time.Since(start) != 799*time.Millisecond {
			t.Fatalf("the renewal took time: %v since the send", time.Since(start))
		}
		if d := ls.Deadline().Sub(start); d != 1699*time.Millisecond {
			t.Fatalf("deadline %v after the send, want 1.699s (renewed at 799ms)", d)
		}
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLateGrantMinimum: the minimum left at the hand-out is the lease's
// safety margin, checked on the local deadline (TTL - margin after the
// request was sent). TTL 1s, margin 100ms: the local deadline is at
// 900ms, so a reply that lags up to 800ms is handed out and one that lags
// longer is refused and released (the key is free at once, not after its
// TTL).
func TestLateGrantMinimum(t *testing.T) {
	for _, c := range []struct {
		lag  time.Duration
		want bool // handed out
	}{
		{0, true},
		{799 * time.Millisecond, true},
		{800 * time.Millisecond, true},
		{801 * time.Millisecond, false},
		{950 * time.Millisecond, false},
		{1500 * time.Millisecond, false},
	} {
		t.Run(c.lag.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.NewStore()
				a := &lateReplies{Backend: store.Backend()}
				a.lag.Store(int64(c.lag))
				// ManualRenew: the deadline checked is the grant's. With
				// the watchdog, a grant back after its renewal time
				// (TTL/3) is renewed at once, and a renewal that ran
				// before the check moved the deadline to 1.699s (seen
				// under load: the watchdog's goroutine and this one race
				// in real time while the bubble's clock stands still).
				l := mustLocker(t, a, fencedlock.Options{TTL: time.Second, SafetyMargin: 100 * time.Millisecond, ManualRenew: true})
				defer l.Close()
				start := time.Now()
				ls, err := l.TryAcquire(t.Context(), "k")
				if !c.want {
					if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, fencedlock.ErrLateGrant) {
						t.Fatalf("TryAcquire after %v: lease %v, err %v; want ErrLateGrant", c.lag, ls, err)
					}
					if info, _ := store.Backend().Inspect(t.Context(), "k"); info.Held {
						t.Fatalf("the refused grant is still held on the store: %+v", info)
					}
					if n := a.releases.Load(); n != 1 {
						t.Fatalf("%d releases after a refused grant, want 1", n)
					}
					return
				}
				if err != nil {
					t.Fatalf("TryAcquire after %v: %v", c.lag, err)
				}
				if left := time.Until(ls.Deadline()); left < 100*time.Millisecond || ls.Err() != nil {
					t.Fatalf("handed out with %v left (Err %v)", left, ls.Err())
				}
				if d := ls.Deadline().Sub(start); d != 900*time.Millisecond {
					t.Fatalf("deadline %v after the send, want 900ms", d)
				}
				if err := ls.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestAcquireWaitsPastLateGrants: a waiting Acquire (polling, or in a
// server queue, and Do) counts a late grant as not acquired and keeps
// waiting within its context: while every reply lags past the TTL it
// returns no lease, and its error (ctx's end) names the late grant; once
// the replies are on time it gets a lease with its full validity.
func TestAcquireWaitsPastLateGrants(t *testing.T) {
	backends := map[string]func(*lateReplies) driver.Backend{
		"poll":  func(b *lateReplies) driver.Backend { return plain{b} },
		"queue": func(b *lateReplies) driver.Backend { return lateQueue{b} },
	}
	for name, wrap := range backends {
		// lagging returns a Locker (TTL 200ms) on a backend whose every
		// reply lags 350ms, past the TTL, until lag is set to 0.
		lagging := func(t *testing.T) (*lateReplies, *fencedlock.Locker) {
			a := &lateReplies{Backend: memory.New()}
			a.lag.Store(int64(350 * time.Millisecond))
			return a, mustLocker(t, wrap(a), fencedlock.Options{TTL: 200 * time.Millisecond})
		}
		t.Run(name, func(t *testing.T) {
			t.Run("context ends", func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a, l := lagging(t)
					defer l.Close()
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
					defer cancel()
					ls, err := l.Acquire(ctx, "k")
					if err == nil {
						t.Fatalf("Acquire returned a lease granted late: deadline %v ago, Err %v", time.Since(ls.Deadline()), ls.Err())
					}
					if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencedlock.ErrLateGrant) {
						t.Fatalf("Acquire: %v, want ErrNotAcquired, DeadlineExceeded and ErrLateGrant (the last attempt's)", err)
					}
					if n := a.releases.Load(); n < 2 {
						t.Fatalf("%d late grants released: Acquire did not keep trying", n)
					}
					t.Logf("Acquire: %v (%d late grants released)", err, a.releases.Load())
				})
			})
			t.Run("replies on time again", func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a, l := lagging(t)
					defer l.Close()
					time.AfterFunc(time.Second, func() { a.lag.Store(0) })
					start := time.Now()
					var ran bool
					err := l.Do(t.Context(), "k", func(ctx context.Context, ls *fencedlock.Lease) error {
						ran = true
						if time.Since(start) < time.Second {
							t.Errorf("fn ran at %v, while the replies still lagged", time.Since(start))
						}
						if left := time.Until(ls.Deadline()); left < ls.TTL()/10 || ls.Err() != nil {
							t.Errorf("fn got a lease with %v left (Err %v)", left, ls.Err())
						}
						return nil
					})
					if err != nil || !ran {
						t.Fatalf("Do: %v (fn ran: %v)", err, ran)
					}
				})
			})
		})
	}
}

// TestLateGrantConcurrent: 20 acquirers through lagging replies and one
// direct one on the same store, on 20 keys at once: no lease is handed out
// expired, and no refused grant deletes the direct holder's lock.
func TestLateGrantConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, la, lb := lateAndDirect(t, time.Second)
		var wg sync.WaitGroup
		for i := range 20 {
			key := string(rune('a' + i))
			wg.Go(func() {
				ach := make(chan error, 1)
				go func() {
					ls, err := la.TryAcquire(t.Context(), key)
					if err == nil {
						err = errors.New("handed out")
						if ls.Err() != nil || !time.Now().Before(ls.Deadline()) {
							err = errors.New("handed out expired")
						}
						ls.Release(t.Context())
					}
					ach <- err
				}()
				time.Sleep(250 * time.Millisecond)
				lsB, err := lb.Acquire(t.Context(), key)
				if err != nil {
					t.Errorf("%s: B: %v", key, err)
					return
				}
				if err := <-ach; !errors.Is(err, fencedlock.ErrLateGrant) {
					t.Errorf("%s: A: %v, want ErrLateGrant", key, err)
				}
				if err := lsB.Release(t.Context()); err != nil {
					t.Errorf("%s: B's release after A's refusal: %v", key, err)
				}
			})
		}
		wg.Wait()
	})
}
