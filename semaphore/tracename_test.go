package semaphore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/locktrace"
	"github.com/fencedlock/fencedlock/semaphore"
)

// TestTraceNamesTheBackend: a permit's trace events name the backend the
// Semaphore runs on ("memory"), as a plain Locker's do, not the package of
// the view its permits' Locker runs on ("semaphore"): package otel puts
// the name in its fencedlock.backend attribute.
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
	s, err := semaphore.New(memory.New(), fencedlock.Options{Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Acquire(t.Context(), "traced", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen["memory"] < 3 {
		t.Fatalf("trace events of a permit named the backends %v, want memory only (3 events at least)", seen)
	}
}
