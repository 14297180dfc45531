package multilock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/locktrace"
	"github.com/fencedlock/fencedlock/multilock"
)

// TestTraceNamesTheBackend: a set's trace events name the backend the
// Locker runs on ("memory"), as a plain Locker's do, not the package of
// the view the sets' Locker runs on ("multilock"): package otel puts the
// name in its fencedlock.backend attribute.
func TestTraceNamesTheBackend(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(name string) { mu.Lock(); seen[name]++; mu.Unlock() }
	tr := &locktrace.Trace{
		AcquireStart: func(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
			note(e.Backend)
			return ctx
		},
		AcquireEnd: func(_ context.Context, e locktrace.AcquireEndEvent) { note(e.Backend) },
		LeaseEnd:   func(e locktrace.LeaseEndEvent) { note(e.Backend) },
	}
	m, err := multilock.New(memory.New(), fencedlock.Options{Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Acquire(t.Context(), []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen["memory"] < 3 {
		t.Fatalf("trace events of a set named the backends %v, want memory only (3 events at least)", seen)
	}
}
