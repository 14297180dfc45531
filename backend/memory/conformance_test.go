package memory_test

import (
	"context"
	"testing"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/procfault"
)

// harness runs the conformance suite on backend/memory: independent
// Backends on one shared Store. (The run lived in conformance/memory_test.go
// until issue 30 moved it beside the backend it tests.)
type harness struct{ s *memory.Store }

func (h harness) NewBackend(context.Context) (driver.Backend, error) {
	return h.s.Backend(), nil
}

func (h harness) Invalidate(_ context.Context, key string) error {
	h.s.Invalidate(key)
	return nil
}

func (h harness) Config() conformance.Config { return conformance.Config{} }

// NewFaultyBackend makes the harness a conformance.FaultInjector: the
// faults sit between the caller and the store's Backend.
func (h harness) NewFaultyBackend(context.Context) (driver.Backend, conformance.Faults, error) {
	f := &procfault.Faults{}
	return procfault.Backend{Backend: h.s.Backend(), F: f}, f, nil
}

// TestConformance runs the conformance suite on backend/memory.
func TestConformance(t *testing.T) {
	conformance.Run(t, func(*testing.T) conformance.Harness { return harness{memory.NewStore()} })
}
