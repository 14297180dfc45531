package otelfencedlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/locktrace"
	otelfencedlock "github.com/fencedlock/fencedlock/otel"
)

var errTest = errors.New("test: work failed")

func memoryStore(*testing.T) store {
	s := memory.NewStore()
	return store{
		name:    "memory",
		backend: func(*testing.T) driver.Backend { return s.Backend() },
		del: func(t *testing.T, key string) {
			if !s.Invalidate(key) {
				t.Fatalf("no lock on %q", key)
			}
		},
		waitKind:    locktrace.WaitHeld,
		waitsBefore: 2,
		ttl:         time.Second,
	}
}

func TestMemoryHandOff(t *testing.T) { handOff(t, memoryStore(t)) }

func TestMemoryLostByDel(t *testing.T) { lostByDel(t, memoryStore(t)) }

// TestDoSpans: Do's spans are the acquire, the critical section (the
// parent of the function's spans) and the release, all children of the
// caller's span; a failed function marks the critical section.
func TestDoSpans(t *testing.T) {
	tm := newTelemetry(t)
	l := locker(t, memory.New(), tm.obs.Trace(), fencedlock.Options{TTL: time.Second})
	ctx, root := tm.tp.Tracer("test").Start(context.Background(), "root")
	var fence uint64
	err := l.Do(ctx, "orders", func(ctx context.Context, ls *fencedlock.Lease) error {
		_, work := tm.tp.Tracer("test").Start(ctx, "work")
		work.End()
		fence = uint64(ls.Fence())
		return errTest
	})
	root.End()
	if !errors.Is(err, errTest) {
		t.Fatal(err)
	}
	parent := func(name string) string {
		t.Helper()
		spans := tm.ended(name)
		if len(spans) != 1 {
			t.Fatalf("%d %s spans", len(spans), name)
		}
		for _, p := range tm.spans.Ended() {
			if p.SpanContext().SpanID() == spans[0].Parent().SpanID() {
				return p.Name()
			}
		}
		return ""
	}
	for name, want := range map[string]string{
		"fencedlock.acquire":          "root",
		"fencedlock.critical_section": "root",
		"fencedlock.release":          "root",
		"work":                        "fencedlock.critical_section",
	} {
		if got := parent(name); got != want {
			t.Fatalf("%s's parent is %q, want %q", name, got, want)
		}
	}
	cs := tm.ended("fencedlock.critical_section")[0]
	if cs.Status().Code != codes.Error {
		t.Fatalf("critical section status %v after a failed function", cs.Status())
	}
	if v, _ := attr(cs, otelfencedlock.AttrFence); uint64(v.AsInt64()) != fence {
		t.Fatalf("critical section fence %d, want %d", v.AsInt64(), fence)
	}
	ms := tm.metrics(t)
	if n, _, _ := hist(t, ms, "fencedlock.critical_section.duration", otelfencedlock.AttrLeaseLost.Bool(false)); n != 1 {
		t.Fatalf("critical_section.duration count %d, want 1", n)
	}
}

// TestLostAtDeadline: a lease nobody renews is lost at its local deadline,
// counted with cause deadline.
func TestLostAtDeadline(t *testing.T) {
	tm := newTelemetry(t)
	l := locker(t, memory.New(), tm.obs.Trace(), fencedlock.Options{TTL: fencedlock.MinTTL, ManualRenew: true})
	ls, err := l.TryAcquire(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	locktest.Lost(t, ls, 10*time.Second, "not lost at the deadline")
	ms := tm.metrics(t)
	if n := sum(t, ms, "fencedlock.lease.lost", otelfencedlock.AttrEndCause.String("deadline")); n != 1 {
		t.Fatalf("lease.lost{deadline} %d, want 1", n)
	}
	if n, _, _ := hist(t, ms, "fencedlock.acquire.duration", otelfencedlock.AttrBlocking.Bool(false), outcomeAcquired); n != 1 {
		t.Fatalf("acquire.duration{try, acquired} count %d, want 1", n)
	}
	if n, _, _ := hist(t, ms, "fencedlock.acquire.wait.duration"); n != 0 {
		t.Fatalf("a TryAcquire recorded a wait")
	}
}

// TestAcquireOutcomes: a TryAcquire on a held key is not_acquired (no
// error status), an invalid key is an error with error.type invalid.
func TestAcquireOutcomes(t *testing.T) {
	tm := newTelemetry(t)
	s := memory.NewStore()
	holder := locker(t, s.Backend(), nil, fencedlock.Options{})
	l := locker(t, s.Backend(), tm.obs.Trace(), fencedlock.Options{})
	ctx := context.Background()
	if _, err := holder.TryAcquire(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "orders"); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, ""); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatal(err)
	}
	ms := tm.metrics(t)
	if n, _, _ := hist(t, ms, "fencedlock.acquire.duration", otelfencedlock.AttrOutcome.String("not_acquired")); n != 1 {
		t.Fatalf("not_acquired count %d, want 1", n)
	}
	if n, _, _ := hist(t, ms, "fencedlock.acquire.duration", otelfencedlock.AttrOutcome.String("error"), otelfencedlock.AttrErrorType.String("invalid")); n != 1 {
		t.Fatalf("error{invalid} count %d, want 1", n)
	}
	spans := tm.ended("fencedlock.acquire")
	if len(spans) != 2 || spans[0].Status().Code == codes.Error || spans[1].Status().Code != codes.Error {
		t.Fatalf("acquire spans: %s", tm.describe())
	}
}

// TestErrorType: each class of error.type, for its sentinel wrapped, and
// the first class in ErrorType's order when an error matches two.
func TestErrorType(t *testing.T) {
	wrap := func(err error) error { return errors.Join(errors.New("fencedlock: key \"k\""), err) }
	for err, want := range map[error]string{
		nil:                             "",
		errors.New("other"):             "_OTHER",
		wrap(fencedlock.ErrLeaseLost):   "lease_lost",
		wrap(fencedlock.ErrNotHeld):     "not_held",
		wrap(fencedlock.ErrClosed):      "closed",
		wrap(fencedlock.ErrInvalid):     "invalid",
		wrap(fencedlock.ErrPermanent):   "permanent",
		wrap(context.DeadlineExceeded):  "timeout",
		wrap(context.Canceled):          "canceled",
		wrap(fencedlock.ErrNotAcquired): "not_acquired",
		errors.Join(fencedlock.ErrNotAcquired, context.Canceled): "canceled",
	} {
		if got := otelfencedlock.ErrorType(err); got != want {
			t.Errorf("ErrorType(%v) = %q, want %q", err, got, want)
		}
	}
}
