// Package semaphoretest holds the semaphore scenarios every backend runs
// (backend/memory through package semaphore's tests, a real Redis and a
// real etcd cluster in their own tests), with only the constructors
// changed: limit+1 contenders never valid at once, a paused holder's write
// refused by the backend's fencing.Store, a crashed permit coming back at
// its TTL, a cancelled Acquire leaving nothing, callers disagreeing on the
// limit.
package semaphoretest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/semaphore"
)

// Setup is what the scenarios need from a backend's test.
type Setup struct {
	// New returns a Semaphore on a backend of its own, as another process
	// would have, closed when t ends. opts.TTL is zero or TTL.
	New func(t *testing.T, opts fencedlock.Options) *semaphore.Semaphore
	// Store is the backend's fenced store.
	Store fencing.Store
	// TTL is the short lease of the scenarios with a holder paused or
	// crashed past it.
	TTL time.Duration
	// FIFO says the backend's lock serves waiters in arrival order (a
	// driver.WaitAcquirer), and so the semaphore's waiters too
	// (WaitersInOrder).
	FIFO bool
}

func name(prefix string) string { return prefix + "-" + rand.Text()[:8] }

// retrying are the options of a waiter that must get a permit soon after
// one is free (short retry delays where the backend polls).
var retrying = fencedlock.Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}

func acquire(t *testing.T, ctx context.Context, s *semaphore.Semaphore, n string, limit int) *semaphore.Permit {
	t.Helper()
	p, err := s.Acquire(ctx, n, limit)
	if err != nil {
		t.Fatalf("Acquire(%q, %d): %v", n, limit, err)
	}
	if p.Slot() < 0 || p.Slot() >= limit || p.Name() != n || p.Key() != semaphore.SlotKey(n, p.Slot()) {
		t.Fatalf("Acquire(%q, %d) = slot %d, name %q, key %q: outside the limit or misnamed", n, limit, p.Slot(), p.Name(), p.Key())
	}
	return p
}

// ledger records the permits held inside a critical section and checks,
// on each entry, how many are valid and that each slot's fences grow.
type ledger struct {
	mu         sync.Mutex
	inside     map[*semaphore.Permit]struct{}
	last       map[int]fencing.Token // the greatest fence seen per slot
	entries    int
	maxValid   int
	violations []string
}

func newLedger() *ledger {
	return &ledger{inside: map[*semaphore.Permit]struct{}{}, last: map[int]fencing.Token{}}
}

// valid reports whether p is held by its holder's own account.
func valid(p *semaphore.Permit, now time.Time) bool {
	return p.Err() == nil && now.Before(p.Deadline())
}

// enter records p; below is the limit of the caller that took it: the
// valid permits of slots below it must be at most below.
func (l *ledger) enter(p *semaphore.Permit, limit, below int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	all, low := 1, 1
	for q := range l.inside {
		if !valid(q, now) {
			continue
		}
		all++
		if q.Slot() < below {
			low++
		}
		if q.Slot() == p.Slot() {
			l.violate("slot %d granted (fence %v) while fence %v still validly held it", p.Slot(), p.Fence(), q.Fence())
		}
	}
	if all > limit || low > below {
		l.violate("%d valid permits (%d below slot %d) with limit %d", all, low, below, limit)
	}
	if p.Fence() <= l.last[p.Slot()] {
		l.violate("slot %d's fence went back: %v after %v", p.Slot(), p.Fence(), l.last[p.Slot()])
	}
	l.last[p.Slot()] = max(l.last[p.Slot()], p.Fence())
	l.maxValid = max(l.maxValid, all)
	l.inside[p] = struct{}{}
	l.entries++
}

func (l *ledger) violate(format string, args ...any) {
	if len(l.violations) < 5 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

func (l *ledger) leave(p *semaphore.Permit) {
	l.mu.Lock()
	delete(l.inside, p)
	l.mu.Unlock()
}

// contend runs callers goroutines, caller i with limits[i%len(limits)],
// each taking a permit rounds times, holding it a moment and releasing it.
// It fails t on a violation the ledger saw, and returns the ledger.
func contend(t *testing.T, s Setup, n string, limits []int, callers, rounds int) *ledger {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	top := 0
	for _, l := range limits {
		top = max(top, l)
	}
	sems := make([]*semaphore.Semaphore, 3)
	for i := range sems {
		sems[i] = s.New(t, retrying)
	}
	led := newLedger()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		limit := limits[i%len(limits)]
		wg.Go(func() {
			for range rounds {
				p, err := sems[i%len(sems)].Acquire(ctx, n, limit)
				if err != nil {
					errs <- err
					return
				}
				if p.Slot() >= limit {
					errs <- fmt.Errorf("a caller of limit %d got slot %d", limit, p.Slot())
				}
				led.enter(p, top, limit)
				time.Sleep(10 * time.Millisecond) // long enough for the holders to overlap
				led.leave(p)
				if err := p.Release(ctx); err != nil {
					errs <- fmt.Errorf("release of slot %d: %w", p.Slot(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, v := range led.violations {
		t.Error(v)
	}
	return led
}

// LimitNeverExceeded: callers (more than limit) on three Semaphores
// contend for a semaphore of limit: never more than limit valid permits,
// never two valid permits of one slot, each slot's fences increasing.
func LimitNeverExceeded(t *testing.T, s Setup, limit, callers, rounds int) {
	led := contend(t, s, name("limit"), []int{limit}, callers, rounds)
	if led.entries != callers*rounds {
		t.Errorf("%d permits granted, want %d", led.entries, callers*rounds)
	}
	t.Logf("%d permits granted to %d callers, at most %d valid at once (limit %d), %d slots used", led.entries, callers, led.maxValid, limit, len(led.last))
}

// LimitsDisagree: callers with limits small and large contend for one
// name: a caller never gets a slot at or above its own limit, the valid
// permits below small are at most small, and all of them at most large.
func LimitsDisagree(t *testing.T, s Setup, small, large, callers, rounds int) {
	led := contend(t, s, name("limits"), []int{small, large}, callers, rounds)
	t.Logf("limits %d and %d: %d permits granted, at most %d valid at once", small, large, led.entries, led.maxValid)
}

// wantStale fails t unless err is a *fencing.StaleError that saw accepted.
func wantStale(t *testing.T, err error, accepted fencing.Token, why string) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Accepted != accepted {
		t.Fatalf("%s: %v, want a *fencing.StaleError having accepted %v", why, err, accepted)
	}
}
