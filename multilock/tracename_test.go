package multilock_test

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/multilock"
)

// TestTraceNamesTheBackend: a set's trace events name the backend the
// Locker runs on ("memory"), as a plain Locker's do, not the package of
// the view the sets' Locker runs on ("multilock"): package otel puts the
// name in its fencedlock.backend attribute.
func TestTraceNamesTheBackend(t *testing.T) {
	ev := locktest.NewTraceNames("memory")
	m, err := multilock.New(memory.New(), fencedlock.Options{Trace: ev.Trace()})
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
	ev.Check(t, 3, "a set on memory")
}
