package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// full is a jitter that always picks the whole backoff, so that waits are
// exact.
func full(d time.Duration) time.Duration { return d }

var errTransient = errors.New("connection reset")

func heldFor(d time.Duration) error { return &HeldError{Key: "k", RetryAfter: d} }

// TestWaitPolicyNext: the decision after a failed attempt, as a function
// of the error, the backoff and the notifier alone.
func TestWaitPolicyNext(t *testing.T) {
	const maxD = 80 * time.Millisecond
	cases := []struct {
		name      string
		notifier  bool
		watching  bool
		err       error
		backoff   time.Duration
		want      waitStep
		wantNext  time.Duration
		wantRange [2]time.Duration // with the real jitter: the sleep's bounds
	}{
		{"permanent", false, false, fmt.Errorf("x: %w", ErrPermanent), 10 * time.Millisecond, waitStep{giveUp: true}, 10 * time.Millisecond, [2]time.Duration{}},
		{"invalid", true, false, ErrInvalid, 10 * time.Millisecond, waitStep{giveUp: true}, 10 * time.Millisecond, [2]time.Duration{}},
		{"closed", true, true, ErrClosed, 10 * time.Millisecond, waitStep{giveUp: true}, 10 * time.Millisecond, [2]time.Duration{}},
		{"transient: backoff", false, false, errTransient, 10 * time.Millisecond, waitStep{sleep: 10 * time.Millisecond}, 20 * time.Millisecond, [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}},
		{"transient with a notifier: no watch", true, false, errTransient, 10 * time.Millisecond, waitStep{sleep: 10 * time.Millisecond}, 20 * time.Millisecond, [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}},
		{"backoff capped", false, false, errTransient, 60 * time.Millisecond, waitStep{sleep: 60 * time.Millisecond}, maxD, [2]time.Duration{30 * time.Millisecond, 60 * time.Millisecond}},
		{"held, no hint", false, false, ErrNotAcquired, 40 * time.Millisecond, waitStep{sleep: 40 * time.Millisecond}, maxD, [2]time.Duration{20 * time.Millisecond, 40 * time.Millisecond}},
		{"held, short hint", false, false, heldFor(3 * time.Millisecond), 40 * time.Millisecond, waitStep{sleep: 4 * time.Millisecond}, maxD, [2]time.Duration{4 * time.Millisecond, 4 * time.Millisecond}},
		{"held, long hint", false, false, heldFor(time.Hour), 40 * time.Millisecond, waitStep{sleep: 40 * time.Millisecond}, maxD, [2]time.Duration{20 * time.Millisecond, 40 * time.Millisecond}},
		{"held, notifier: watch", true, false, heldFor(time.Hour), 10 * time.Millisecond, waitStep{watch: true, sleep: 10 * time.Millisecond}, 20 * time.Millisecond, [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}},
		{"held, watching, hint: until the hint, at most max", true, true, heldFor(time.Hour), 10 * time.Millisecond, waitStep{sleep: maxD}, 20 * time.Millisecond, [2]time.Duration{maxD, maxD}},
		{"held, watching, short hint", true, true, heldFor(3 * time.Millisecond), 40 * time.Millisecond, waitStep{sleep: 4 * time.Millisecond}, maxD, [2]time.Duration{4 * time.Millisecond, 4 * time.Millisecond}},
		{"held, watching, no hint", true, true, ErrNotAcquired, 10 * time.Millisecond, waitStep{sleep: 10 * time.Millisecond}, 20 * time.Millisecond, [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := waitPolicy{max: maxD, notifier: c.notifier, jitter: full}
			step, next := p.next(c.err, c.backoff, c.watching)
			if step != c.want || next != c.wantNext {
				t.Fatalf("next = %+v, %v; want %+v, %v", step, next, c.want, c.wantNext)
			}
			p.jitter = jitter
			for range 100 {
				step, _ := p.next(c.err, c.backoff, c.watching)
				if !step.giveUp && (step.sleep < c.wantRange[0] || step.sleep > c.wantRange[1]) {
					t.Fatalf("with jitter: sleep %v, want within %v", step.sleep, c.wantRange)
				}
			}
		})
	}
}

// script is a Backend whose Acquire fails with errs in turn, then grants;
// it records when each attempt came.
type script struct {
	mu   sync.Mutex
	errs []error
	at   []time.Time
}

func (s *script) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.at)
	s.at = append(s.at, time.Now())
	if i < len(s.errs) {
		return driver.Grant{}, s.errs[i]
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: 1, TTL: req.TTL}, nil
}

func (s *script) Renew(_ context.Context, _ driver.Grant, ttl time.Duration) (time.Duration, error) {
	return ttl, nil
}
func (s *script) Release(context.Context, driver.Grant) error { return nil }
func (s *script) Close() error                                { return nil }

// watching adds a Notifier that never announces anything.
type watching struct{ *script }

func (watching) Watch(context.Context, string) (<-chan struct{}, func(), error) {
	return make(chan struct{}), func() {}, nil
}

// TestWaitSleepsAsPolicy: a waiting Acquire makes its attempts exactly as
// far apart as the policy decides (fake clock, jitter off), with and
// without a Notifier.
func TestWaitSleepsAsPolicy(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name     string
		notifier bool
		errs     []error
		want     []time.Duration // attempt times
	}{
		// 10ms backoff after a transient error, 20ms for a holder
		// without hint, 4ms for a 3ms hint, 80ms (the cap) for an
		// hour's hint.
		{"polling", false, []error{errTransient, ErrNotAcquired, heldFor(3 * ms), heldFor(time.Hour)},
			[]time.Duration{0, 10 * ms, 30 * ms, 34 * ms, 114 * ms}},
		// Watch and retry at once, then the hint capped at
		// MaxRetryDelay (notifications may be lost), then the backoff.
		{"notifier", true, []error{heldFor(time.Hour), heldFor(time.Hour), ErrNotAcquired},
			[]time.Duration{0, 0, 80 * ms, 100 * ms}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &script{errs: c.errs}
				var b driver.Backend = s
				if c.notifier {
					b = watching{s}
				}
				l, err := New(b, Options{TTL: time.Second, MinRetryDelay: 10 * ms, MaxRetryDelay: 80 * ms})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				l.policy.jitter = full
				start := time.Now()
				ls, err := l.Acquire(t.Context(), "k")
				if err != nil {
					t.Fatal(err)
				}
				defer ls.Release(t.Context())
				s.mu.Lock()
				defer s.mu.Unlock()
				got := make([]time.Duration, len(s.at))
				for i, at := range s.at {
					got[i] = at.Sub(start)
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("attempts at %v, want %v", got, c.want)
				}
			})
		})
	}
}
