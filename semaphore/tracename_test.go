package semaphore_test

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// TestTraceNamesTheBackend: a permit's trace events name the backend the
// Semaphore runs on ("memory"), as a plain Locker's do, not the package of
// the view its permits' Locker runs on ("semaphore"): package otel puts
// the name in its fencedlock.backend attribute.
func TestTraceNamesTheBackend(t *testing.T) {
	ev := locktest.NewTraceNames("memory")
	s, err := semaphore.New(memory.New(), fencedlock.Options{Trace: ev.Trace()})
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
	ev.Check(t, 3, "a permit on memory")
}
