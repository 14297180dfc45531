package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/locktrace"
)

// recorder is a Trace (see trace) that logs every event as a line, and signals
// the waits it sees.
type recorder struct {
	mu     sync.Mutex
	events []any
	waits  chan locktrace.AcquireWaitEvent
}

type ctxMark struct{}

func newRecorder() *recorder { return &recorder{waits: make(chan locktrace.AcquireWaitEvent, 100)} }

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

func (r *recorder) AcquireStart(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
	r.add(e)
	return context.WithValue(ctx, ctxMark{}, "acquire")
}

func (r *recorder) AcquireWait(ctx context.Context, e locktrace.AcquireWaitEvent) {
	if ctx.Value(ctxMark{}) != "acquire" {
		panic("AcquireWait without AcquireStart's context")
	}
	r.add(e)
	r.waits <- e
}

func (r *recorder) AcquireEnd(ctx context.Context, e locktrace.AcquireEndEvent) {
	if ctx.Value(ctxMark{}) != "acquire" {
		panic("AcquireEnd without AcquireStart's context")
	}
	r.add(e)
}

func (r *recorder) Renewed(_ context.Context, e locktrace.RenewEvent) { r.add(e) }
func (r *recorder) LeaseEnd(e locktrace.LeaseEndEvent)                { r.add(e) }

func (r *recorder) CriticalStart(ctx context.Context, e locktrace.LeaseInfo) context.Context {
	return r.start(ctx, "critical", e.Key)
}

func (r *recorder) CriticalEnd(ctx context.Context, e locktrace.CriticalEndEvent) {
	r.end(ctx, "critical", e)
}

func (r *recorder) ReleaseStart(ctx context.Context, e locktrace.LeaseInfo) context.Context {
	return r.start(ctx, "release", e.Key)
}

func (r *recorder) ReleaseEnd(ctx context.Context, e locktrace.ReleaseEndEvent) {
	r.end(ctx, "release", e)
}

// start records the start of a phase ("critical", "release") of the lease
// of key and returns ctx marked with it, for the phase's end.
func (r *recorder) start(ctx context.Context, phase, key string) context.Context {
	r.add(phase + " start " + key)
	return context.WithValue(ctx, ctxMark{}, phase)
}

// end records e, the end of a phase, which must come with the context its
// start returned.
func (r *recorder) end(ctx context.Context, phase string, e any) {
	if ctx.Value(ctxMark{}) != phase {
		panic("the end of phase " + phase + " without its start's context")
	}
	r.add(e)
}

// trace returns the Trace that records into r: every hook set.
func (r *recorder) trace() *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart: r.AcquireStart, AcquireWait: r.AcquireWait, AcquireEnd: r.AcquireEnd,
		Renewed: r.Renewed, LeaseEnd: r.LeaseEnd,
		CriticalStart: r.CriticalStart, CriticalEnd: r.CriticalEnd,
		ReleaseStart: r.ReleaseStart, ReleaseEnd: r.ReleaseEnd,
	}
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
	opts.Trace = r.trace()
	l, err := fencedlock.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitFor returns the n-th wait of kind.
func waitFor(t *testing.T, r *recorder, kind locktrace.WaitKind, n int) locktrace.AcquireWaitEvent {
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

// TestTraceHandOff: a blocking Acquire that waits for a holder, is woken
// by the release notification and gets the key reports the wait and the
// hand-off; the holder's lease, release and the try that found it held
// are reported too.
func TestTraceHandOff(t *testing.T) {
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
	got := locktest.AcquireAsync(ctx, t, lb, "k")
	// The second held wait comes after the watch is in effect: the
	// release below is then announced to the waiter.
	w := waitFor(t, rb, locktrace.WaitHeld, 2)
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

	ends := of[locktrace.AcquireEndEvent](rb)
	if len(ends) != 2 {
		t.Fatalf("%d AcquireEnd events, want 2: %+v", len(ends), ends)
	}
	try, wait := ends[0], ends[1]
	if try.Outcome != locktrace.NotAcquired || try.Blocking || try.HandOff || try.Fence != 0 || try.Holder != "" {
		t.Fatalf("TryAcquire's end %+v", try)
	}
	if wait.Outcome != locktrace.Acquired || !wait.Blocking || !wait.HandOff || wait.Err != nil {
		t.Fatalf("Acquire's end %+v", wait)
	}
	if wait.Fence != ls.Fence() || wait.Holder != ls.Holder() || wait.Fence <= held.Fence() || wait.TTL != 5*time.Second {
		t.Fatalf("Acquire's end %+v, lease fence %d holder %s", wait, ls.Fence(), ls.Holder())
	}
	if wait.Waited < heldFor || wait.Duration < wait.Waited {
		t.Fatalf("Acquire waited %v of %v, want at least %v", wait.Waited, wait.Duration, heldFor)
	}
	kinds := []locktrace.WaitKind{}
	for _, e := range of[locktrace.AcquireWaitEvent](rb) {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) < 2 || kinds[len(kinds)-1] != locktrace.WaitNotified || kinds[0] != locktrace.WaitHeld {
		t.Fatalf("wait kinds %v, want held ... notified", kinds)
	}
	starts := of[locktrace.AcquireStartEvent](rb)
	if len(starts) != 2 || starts[0].Blocking || !starts[1].Blocking {
		t.Fatalf("starts %+v", starts)
	}

	// The holder: one lease, ended by its release.
	le := of[locktrace.LeaseEndEvent](ra)
	if len(le) != 1 || le[0].Cause != locktrace.EndReleased || le[0].Err != nil || le[0].Fence != held.Fence() || le[0].Held < heldFor {
		t.Fatalf("holder's lease ends %+v", le)
	}
	re := of[locktrace.ReleaseEndEvent](ra)
	if len(re) != 1 || re[0].Outcome != locktrace.Released || re[0].Holder != held.Holder() {
		t.Fatalf("holder's releases %+v", re)
	}
	// A second Release is reported as not held.
	if err := held.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatal(err)
	}
	if re := of[locktrace.ReleaseEndEvent](ra); len(re) != 2 || re[1].Outcome != locktrace.ReleaseNotHeld {
		t.Fatalf("second release %+v", re)
	}
	if le := of[locktrace.LeaseEndEvent](ra); len(le) != 1 {
		t.Fatalf("a lease ended twice: %+v", le)
	}
	noOwnerTokens(t, ra, a, b)
	noOwnerTokens(t, rb, a, b)
}

// TestTraceLosses: each way of losing a lease is reported once with its
// cause, and so are the renewal that found it gone and the release after.
func TestTraceLosses(t *testing.T) {
	ctx := context.Background()
	t.Run("deadline", func(t *testing.T) {
		r := newRecorder()
		l := observed(t, memory.New(), r, fencedlock.Options{TTL: fencedlock.MinTTL, ManualRenew: true})
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		locktest.Lost(t, ls, 10*time.Second, "not lost at the deadline")
		le := of[locktrace.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != locktrace.EndDeadline || le[0].Held <= 0 || le[0].Held > fencedlock.MinTTL+10*time.Second {
			t.Fatalf("lease ends %+v", le)
		}
		if err := ls.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
			t.Fatal(err)
		}
		if re := of[locktrace.ReleaseEndEvent](r); len(re) != 1 || re[0].Outcome != locktrace.ReleaseNotHeld {
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
		rn := of[locktrace.RenewEvent](r)
		if len(rn) != 2 || rn[0].Err != nil || !errors.Is(rn[1].Err, fencedlock.ErrNotHeld) || rn[1].KeepAlive || rn[1].Fence != ls.Fence() {
			t.Fatalf("renewals %+v", rn)
		}
		le := of[locktrace.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != locktrace.EndNotHeld || !errors.Is(le[0].Err, fencedlock.ErrNotHeld) {
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
		le := of[locktrace.LeaseEndEvent](r)
		if len(le) != 1 || le[0].Cause != locktrace.EndInvalidated || !errors.Is(le[0].Err, fencedlock.ErrPermanent) {
			t.Fatalf("lease ends %+v", le)
		}
	})
}

// TestTraceDo: Do's function runs on CriticalStart's context, and the
// events come in order: acquire, critical section, release, lease end.
func TestTraceDo(t *testing.T) {
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
		case locktrace.CriticalEndEvent:
			if !errors.Is(e.Err, boom) || e.Lost || uint64(e.Fence) != fence {
				t.Fatalf("critical end %+v", e)
			}
			seq = append(seq, "critical end")
		default:
			seq = append(seq, fmt.Sprintf("%T", e))
		}
	}
	want := "locktrace.AcquireStartEvent locktrace.AcquireEndEvent critical start k critical end release start k locktrace.LeaseEndEvent locktrace.ReleaseEndEvent"
	if got := strings.Join(seq, " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
}

// TestTraceAcquireErrors: invalid input and a failing backend are
// reported as errors, a wait ended by its context as not acquired.
func TestTraceAcquireErrors(t *testing.T) {
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
	ends := of[locktrace.AcquireEndEvent](r)
	if len(ends) != 3 {
		t.Fatalf("ends %+v", ends)
	}
	for i, want := range []locktrace.AcquireOutcome{locktrace.AcquireErr, locktrace.AcquireErr, locktrace.NotAcquired} {
		if ends[i].Outcome != want || ends[i].Err == nil || ends[i].HandOff {
			t.Fatalf("end %d: %+v, want %s", i, ends[i], want)
		}
	}
	if ends[2].Waited <= 0 {
		t.Fatalf("a wait ended by its context reports no wait time: %+v", ends[2])
	}
}

// nopTrace is a Trace whose every hook does nothing: the cost of the
// hooks' calls and event structs.
func nopTrace() *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart:  func(ctx context.Context, _ locktrace.AcquireStartEvent) context.Context { return ctx },
		AcquireWait:   func(context.Context, locktrace.AcquireWaitEvent) {},
		AcquireEnd:    func(context.Context, locktrace.AcquireEndEvent) {},
		Renewed:       func(context.Context, locktrace.RenewEvent) {},
		LeaseEnd:      func(locktrace.LeaseEndEvent) {},
		CriticalStart: func(ctx context.Context, _ locktrace.LeaseInfo) context.Context { return ctx },
		CriticalEnd:   func(context.Context, locktrace.CriticalEndEvent) {},
		ReleaseStart:  func(ctx context.Context, _ locktrace.LeaseInfo) context.Context { return ctx },
		ReleaseEnd:    func(context.Context, locktrace.ReleaseEndEvent) {},
	}
}

// BenchmarkLockerPathsObserved is BenchmarkLockerPaths with a Trace whose
// every hook does nothing.
func BenchmarkLockerPathsObserved(b *testing.B) {
	benchLockerPaths(b, fencedlock.Options{TTL: time.Minute, Trace: nopTrace()})
}

// TestTracePartial: a Trace with only some hooks set calls those, and the
// nil ones are off (no nil-func call), on every path: a contended blocking
// Acquire (waits, a notification), Do, Release and a loss.
func TestTracePartial(t *testing.T) {
	ctx := context.Background()
	for _, set := range []string{"AcquireEnd", "AcquireWait", "LeaseEnd", "ReleaseEnd", "CriticalEnd", "AcquireStart"} {
		t.Run(set, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
			tr := &locktrace.Trace{}
			switch set {
			case "AcquireEnd":
				tr.AcquireEnd = func(context.Context, locktrace.AcquireEndEvent) { note(set) }
			case "AcquireWait":
				tr.AcquireWait = func(context.Context, locktrace.AcquireWaitEvent) { note(set) }
			case "LeaseEnd":
				tr.LeaseEnd = func(locktrace.LeaseEndEvent) { note(set) }
			case "ReleaseEnd":
				tr.ReleaseEnd = func(context.Context, locktrace.ReleaseEndEvent) { note(set) }
			case "CriticalEnd":
				tr.CriticalEnd = func(context.Context, locktrace.CriticalEndEvent) { note(set) }
			case "AcquireStart":
				tr.AcquireStart = func(ctx context.Context, _ locktrace.AcquireStartEvent) context.Context { note(set); return ctx }
			}
			store := memory.NewStore()
			holder := mustLocker(t, store.Backend(), fencedlock.Options{TTL: 5 * time.Second})
			defer holder.Close()
			spy := &ownerSpy{Backend: store.Backend()}
			l := mustLocker(t, spy, fencedlock.Options{TTL: 5 * time.Second, MaxRetryDelay: 50 * time.Millisecond, Trace: tr})
			defer l.Close()
			held, err := holder.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			got := locktest.AcquireRelease(ctx, l, "k")
			// A second attempt shows the first found the key held: a wait.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				spy.mu.Lock()
				n := len(spy.owners)
				spy.mu.Unlock()
				if n >= 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the blocking Acquire made %d attempts in 10s, want 2", n)
				}
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			if err := l.Do(ctx, "k", func(context.Context, *fencedlock.Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) == 0 {
				t.Fatalf("a Trace with only %s set was never called", set)
			}
			for _, s := range seen {
				if s != set {
					t.Fatalf("a Trace with only %s set reported %s", set, s)
				}
			}
		})
	}
}

// TestTraceCopied: New keeps a copy of Options.Trace, so a hook set on
// the caller's struct afterwards is not called from another goroutine
// (a data race the race detector would report).
func TestTraceCopied(t *testing.T) {
	ctx := context.Background()
	calls := 0
	tr := &locktrace.Trace{}
	l := mustLocker(t, memory.New(), fencedlock.Options{TTL: time.Second, Trace: tr})
	defer l.Close()
	tr.AcquireEnd = func(context.Context, locktrace.AcquireEndEvent) { calls++ }
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("a hook set after New was called %d times", calls)
	}
}

// TestTraceUnsetHooksAllocNothing: a Trace whose hooks for the path taken
// are nil costs what no Trace costs (net/http/httptrace's promise): an
// uncontended TryAcquire+Release and Do with only Renewed set allocate as
// many times as without a Trace. Each figure is the least of 5 runs:
// Releases that start close together share a deadline, so one run in a
// few makes one allocation more, with a Trace or without.
func TestTraceUnsetHooksAllocNothing(t *testing.T) {
	fn := func(context.Context, *fencedlock.Lease) error { return nil }
	allocs := func(tr *locktrace.Trace) (try, do float64) {
		l := mustLocker(t, memory.New(), fencedlock.Options{TTL: time.Minute, Trace: tr})
		defer l.Close()
		try, do = math.Inf(1), math.Inf(1)
		for range 5 {
			a, b := allocsOnce(t, l, fn)
			try, do = min(try, a), min(do, b)
		}
		return try, do
	}
	try0, do0 := allocs(nil)
	try1, do1 := allocs(&locktrace.Trace{Renewed: func(context.Context, locktrace.RenewEvent) {}})
	t.Logf("allocs: TryAcquire+Release %v without a Trace, %v with only Renewed; Do %v, %v", try0, try1, do0, do1)
	if try1 != try0 || do1 != do0 {
		t.Fatalf("a Trace with only Renewed set allocates more than none: TryAcquire+Release %v (want %v), Do %v (want %v)", try1, try0, do1, do0)
	}
}

// allocsOnce returns the allocations of an uncontended TryAcquire+Release
// and of a Do on l.
func allocsOnce(t *testing.T, l *fencedlock.Locker, fn func(context.Context, *fencedlock.Lease) error) (try, do float64) {
	ctx := context.Background()
	try = testing.AllocsPerRun(200, func() {
		ls, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	do = testing.AllocsPerRun(200, func() {
		if err := l.Do(ctx, "k", fn); err != nil {
			t.Fatal(err)
		}
	})
	return try, do
}
