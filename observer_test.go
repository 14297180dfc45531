package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// recorder is an Observer that logs every event as a line, and signals
// the waits it sees.
type recorder struct {
	mu     sync.Mutex
	events []any
	waits  chan fencedlock.AcquireWaitEvent
}

type ctxMark struct{}

func newRecorder() *recorder { return &recorder{waits: make(chan fencedlock.AcquireWaitEvent, 100)} }

func (r *recorder) add(e any) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) all() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.events...)
}

// of returns the recorded events of type T.
func of[T any](r *recorder) []T {
	var out []T
	for _, e := range r.all() {
		if t, ok := e.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func (r *recorder) AcquireStart(ctx context.Context, e fencedlock.AcquireStartEvent) context.Context {
	r.add(e)
	return context.WithValue(ctx, ctxMark{}, "acquire")
}

func (r *recorder) AcquireWait(ctx context.Context, e fencedlock.AcquireWaitEvent) {
	if ctx.Value(ctxMark{}) != "acquire" {
		panic("AcquireWait without AcquireStart's context")
	}
	r.add(e)
	r.waits <- e
}

func (r *recorder) AcquireEnd(ctx context.Context, e fencedlock.AcquireEndEvent) {
	if ctx.Value(ctxMark{}) != "acquire" {
		panic("AcquireEnd without AcquireStart's context")
	}
	r.add(e)
}

func (r *recorder) Renewed(_ context.Context, e fencedlock.RenewEvent) { r.add(e) }
func (r *recorder) LeaseEnd(e fencedlock.LeaseEndEvent)                { r.add(e) }

func (r *recorder) CriticalStart(ctx context.Context, e fencedlock.LeaseInfo) context.Context {
	r.add("critical start " + e.Key)
	return context.WithValue(ctx, ctxMark{}, "critical")
}

func (r *recorder) CriticalEnd(ctx context.Context, e fencedlock.CriticalEndEvent) {
	if ctx.Value(ctxMark{}) != "critical" {
		panic("CriticalEnd without CriticalStart's context")
	}
	r.add(e)
}

func (r *recorder) ReleaseStart(ctx context.Context, e fencedlock.LeaseInfo) context.Context {
	r.add("release start " + e.Key)
	return context.WithValue(ctx, ctxMark{}, "release")
}

func (r *recorder) ReleaseEnd(ctx context.Context, e fencedlock.ReleaseEndEvent) {
	if ctx.Value(ctxMark{}) != "release" {
		panic("ReleaseEnd without ReleaseStart's context")
	}
	r.add(e)
}

// ownerSpy is a memory backend that remembers every owner token it saw.
type ownerSpy struct {
	*memory.Backend
	mu     sync.Mutex
	owners []string
}

func (s *ownerSpy) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	s.mu.Lock()
	s.owners = append(s.owners, req.Owner)
	s.mu.Unlock()
	return s.Backend.Acquire(ctx, req)
}

// noOwnerTokens fails t if any recorded event shows an owner token.
func noOwnerTokens(t *testing.T, r *recorder, spies ...*ownerSpy) {
	t.Helper()
	var owners []string
	for _, s := range spies {
		s.mu.Lock()
		owners = append(owners, s.owners...)
		s.mu.Unlock()
	}
	if len(owners) == 0 {
		t.Fatal("no owner token seen")
	}
	for _, e := range r.all() {
		text := fmt.Sprintf("%+v %#v", e, e)
		for _, o := range owners {
			if strings.Contains(text, o) {
				t.Fatalf("event shows an owner token: %s", text)
			}
		}
	}
}

func observed(t *testing.T, b driver.Backend, r *recorder, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	opts.Observer = r
	l, err := fencedlock.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitFor returns the n-th wait of kind.
func waitFor(t *testing.T, r *recorder, kind fencedlock.WaitKind, n int) fencedlock.AcquireWaitEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-r.waits:
			if e.Kind == kind {
				if n--; n == 0 {
					return e
				}
			}
		case <-timeout:
			t.Fatalf("no %s wait within 10s", kind)
		}
	}
}

// TestObserverHandOff: a blocking Acquire that waits for a holder, is woken
// by the release notification and gets the key reports the wait and the
// hand-off; the holder's lease, release and the try that found it held
// are reported too.
func TestObserverHandOff(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	a, b := &ownerSpy{Backend: store.Backend()}, &ownerSpy{Backend: store.Backend()}
	ra, rb := newRecorder(), newRecorder()
	la := observed(t, a, ra, fencedlock.Options{TTL: 5 * time.Second})
	// A poll (every MaxRetryDelay at the latest) must not beat the
	// notification: the hand-off is the notification's.
	lb := observed(t, b, rb, fencedlock.Options{TTL: 5 * time.Second, MaxRetryDelay: time.Minute})
	if la.BackendName() != "fencedlock_test" { // a wrapper is named by its own package
		t.Fatalf("BackendName %q, want fencedlock_test", la.BackendName())
	}
	if l := observed(t, memory.New(), newRecorder(), fencedlock.Options{}); l.BackendName() != "memory" {
		t.Fatalf("BackendName %q, want memory", l.BackendName())
	}

	held, err := la.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.TryAcquire(ctx, "k"); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v", err)
	}
	got := make(chan *fencedlock.Lease, 1)
	go func() {
		ls, err := lb.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	// The second held wait comes after the watch is in effect: the
	// release below is then announced to the waiter.
	w := waitFor(t, rb, fencedlock.WaitHeld, 2)
	if w.RetryAfter <= 0 || w.RetryAfter > 5*time.Second || w.Key != "k" || w.Backend != lb.BackendName() {
		t.Fatalf("held wait %+v", w)
	}
	heldFor := 20 * time.Millisecond
	time.Sleep(heldFor) // the waiter waits at least this long
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	defer ls.Release(ctx)

	ends := of[fencedlock.AcquireEndEvent](rb)
	if len(ends) != 2 {
		t.Fatalf("%d AcquireEnd events, want 2: %+v", len(ends), ends)
	}
	try, wait := ends[0], ends[1]
	if try.Outcome != fencedlock.NotAcquired || try.Blocking || try.HandOff || try.Fence != 0 || try.Holder != "" {
		t.Fatalf("TryAcquire's end %+v", try)
	}
	if wait.Outcome != fencedlock.Acquired || !wait.Blocking || !wait.HandOff || wait.Err != nil {
		t.Fatalf("Acquire's end %+v", wait)
	}
	if wait.Fence != ls.Fence() || wait.Holder != ls.Holder() || wait.Fence <= held.Fence() || wait.TTL != 5*time.Second {
		t.Fatalf("Acquire's end %+v, lease fence %d holder %s", wait, ls.Fence(), ls.Holder())
	}
	if wait.Waited < heldFor || wait.Duration < wait.Waited {
		t.Fatalf("Acquire waited %v of %v, want at least %v", wait.Waited, wait.Duration, heldFor)
	}
	kinds := []fencedlock.WaitKind{}
	for _, e := range of[fencedlock.AcquireWaitEvent](rb) {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) < 2 || kinds[len(kinds)-1] != fencedlock.WaitNotified || kinds[0] != fencedlock.WaitHeld {
		t.Fatalf("wait kinds %v, want held ... notified", kinds)
	}
	starts := of[fencedlock.AcquireStartEvent](rb)
	if len(starts) != 2 || starts[0].Blocking || !starts[1].Blocking {
		t.Fatalf("starts %+v", starts)
	}

	// The holder: one lease, ended by its release.
	le := of[fencedlock.LeaseEndEvent](ra)
	if len(le) != 1 || le[0].Cause != fencedlock.EndReleased || le[0].Err != nil || le[0].Fence != held.Fence() || le[0].Held < heldFor {
		t.Fatalf("holder's lease ends %+v", le)
	}
	re := of[fencedlock.ReleaseEndEvent](ra)
	if len(re) != 1 || re[0].Outcome != fencedlock.Released || re[0].Holder != held.Holder() {
		t.Fatalf("holder's releases %+v", re)
	}
	// A second Release is reported as not held.
	if err := held.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatal(err)
	}
	if re := of[fencedlock.ReleaseEndEvent](ra); len(re) != 2 || re[1].Outcome != fencedlock.ReleaseNotHeld {
		t.Fatalf("second release %+v", re)
	}
	if le := of[fencedlock.LeaseEndEvent](ra); len(le) != 1 {
		t.Fatalf("a lease ended twice: %+v", le)
	}
	noOwnerTokens(t, ra, a, b)
	noOwnerTokens(t, rb, a, b)
}

// TestObserverLosses: each way of losing a lease is reported once with its
// cause, and so are the renewal that found it gone and the release after.
func TestObserverLosses(t *testing.T) {
	ctx := context.Background()
	t.Run("deadline", func(t *testing.T) {
		r := newRecorder()
		l := observed(t, memory.New(), r, fencedlock.Options{TTL: fencedlock.MinTTL, ManualRenew: true})
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ls.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("not lost at the deadline")
		}
		le := of[fencedlock.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != fencedlock.EndDeadline || le[0].Held <= 0 || le[0].Held > fencedlock.MinTTL+10*time.Second {
			t.Fatalf("lease ends %+v", le)
		}
		if err := ls.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
			t.Fatal(err)
		}
		if re := of[fencedlock.ReleaseEndEvent](r); len(re) != 1 || re[0].Outcome != fencedlock.ReleaseNotHeld {
			t.Fatalf("release %+v", re)
		}
	})
	t.Run("not held", func(t *testing.T) {
		r := newRecorder()
		store := memory.NewStore()
		l := observed(t, store.Backend(), r, fencedlock.Options{TTL: time.Second, ManualRenew: true})
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		store.Invalidate("k")
		if err := ls.Renew(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
			t.Fatal(err)
		}
		rn := of[fencedlock.RenewEvent](r)
		if len(rn) != 2 || rn[0].Err != nil || !errors.Is(rn[1].Err, fencedlock.ErrNotHeld) || rn[1].KeepAlive || rn[1].Fence != ls.Fence() {
			t.Fatalf("renewals %+v", rn)
		}
		le := of[fencedlock.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != fencedlock.EndNotHeld || !errors.Is(le[0].Err, fencedlock.ErrNotHeld) {
			t.Fatalf("lease ends %+v", le)
		}
	})
	t.Run("invalidated", func(t *testing.T) {
		r := newRecorder()
		f := newFake()
		f.renewFn = func(context.Context, driver.Grant, time.Duration) (time.Duration, error) {
			return 0, fmt.Errorf("test: %w", fencedlock.ErrPermanent)
		}
		l := observed(t, f, r, fencedlock.Options{TTL: time.Second, ManualRenew: true})
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Renew(ctx); !errors.Is(err, fencedlock.ErrPermanent) {
			t.Fatal(err)
		}
		le := of[fencedlock.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != fencedlock.EndInvalidated || !errors.Is(le[0].Err, fencedlock.ErrPermanent) {
			t.Fatalf("lease ends %+v", le)
		}
	})
}

// TestObserverDo: Do's function runs on CriticalStart's context, and the
// events come in order: acquire, critical section, release, lease end.
func TestObserverDo(t *testing.T) {
	r := newRecorder()
	l := observed(t, memory.New(), r, fencedlock.Options{TTL: time.Second})
	boom := errors.New("boom")
	var fence uint64
	err := l.Do(context.Background(), "k", func(ctx context.Context, ls *fencedlock.Lease) error {
		if ctx.Value(ctxMark{}) != "critical" {
			t.Error("fn's context does not derive from CriticalStart's")
		}
		fence = uint64(ls.Fence())
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	var seq []string
	for _, e := range r.all() {
		switch e := e.(type) {
		case string:
			seq = append(seq, e)
		case fencedlock.CriticalEndEvent:
			if !errors.Is(e.Err, boom) || e.Lost || uint64(e.Fence) != fence {
				t.Fatalf("critical end %+v", e)
			}
			seq = append(seq, "critical end")
		default:
			seq = append(seq, fmt.Sprintf("%T", e))
		}
	}
	want := "fencedlock.AcquireStartEvent fencedlock.AcquireEndEvent critical start k critical end release start k fencedlock.LeaseEndEvent fencedlock.ReleaseEndEvent"
	if got := strings.Join(seq, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

// TestObserverAcquireErrors: invalid input and a failing backend are
// reported as errors, a wait ended by its context as not acquired.
func TestObserverAcquireErrors(t *testing.T) {
	ctx := context.Background()
	r := newRecorder()
	f := newFake()
	l := observed(t, f, r, fencedlock.Options{TTL: time.Second})
	if _, err := l.Acquire(ctx, ""); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.acquireFn = func(context.Context, driver.AcquireRequest) (driver.Grant, error) {
		return driver.Grant{}, fmt.Errorf("test: %w", fencedlock.ErrPermanent)
	}
	f.mu.Unlock()
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, fencedlock.ErrPermanent) {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.acquireFn = nil
	f.mu.Unlock()
	holder, err := fencedlock.New(f, fencedlock.Options{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Acquire(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(wctx, "k"); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	ends := of[fencedlock.AcquireEndEvent](r)
	if len(ends) != 3 {
		t.Fatalf("ends %+v", ends)
	}
	for i, want := range []fencedlock.AcquireOutcome{fencedlock.AcquireErr, fencedlock.AcquireErr, fencedlock.NotAcquired} {
		if ends[i].Outcome != want || ends[i].Err == nil || ends[i].HandOff {
			t.Fatalf("end %d: %+v, want %s", i, ends[i], want)
		}
	}
	if ends[2].Waited <= 0 {
		t.Fatalf("a wait ended by its context reports no wait time: %+v", ends[2])
	}
}

// BenchmarkLockerPathsObserved is BenchmarkLockerPaths with an Observer
// that does nothing: the cost of the hook's calls and event structs.
func BenchmarkLockerPathsObserved(b *testing.B) {
	benchLockerPaths(b, fencedlock.Options{TTL: time.Minute, Observer: fencedlock.NopObserver{}})
}
