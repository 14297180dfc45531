package conformance_test

import (
	"context"
	"testing"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// memoryHarness runs the suite on backend/memory: independent Backends on
// one shared Store.
type memoryHarness struct{ s *memory.Store }

func (h memoryHarness) NewBackend(context.Context) (driver.Backend, error) {
	return h.s.Backend(), nil
}

func (h memoryHarness) Invalidate(_ context.Context, key string) error {
	h.s.Invalidate(key)
	return nil
}

func (h memoryHarness) Config() conformance.Config { return conformance.Config{} }

// NewFaultyBackend makes the harness a conformance.FaultInjector: the
// faults sit between the caller and the store's Backend.
func (h memoryHarness) NewFaultyBackend(context.Context) (driver.Backend, conformance.Faults, error) {
	f := &procFaults{}
	return faultyBackend{h.s.Backend(), f}, f, nil
}

// TestMemory runs the conformance suite on backend/memory.
func TestMemory(t *testing.T) {
	conformance.Run(t, func(*testing.T) conformance.Harness { return memoryHarness{memory.NewStore()} })
}
