package conformance_test

import (
	"context"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// onMemory is the harness of the broken backends built on backend/memory
// (which passes the suite, see its TestConformance): a fresh memory.Store
// per harness, each of its backends the store's Backend with one bug
// wrapped around it by wrap.
type onMemory struct {
	s    *memory.Store
	wrap func(*memory.Backend) driver.Backend
}

// brokenOnMemory returns the make function of a variant whose backends
// are wrap of a memory Backend.
func brokenOnMemory(wrap func(*memory.Backend) driver.Backend) func() conformance.Harness {
	return func() conformance.Harness { return onMemory{memory.NewStore(), wrap} }
}

func (h onMemory) NewBackend(context.Context) (driver.Backend, error) {
	return h.wrap(h.s.Backend()), nil
}

func (h onMemory) Invalidate(_ context.Context, key string) error {
	h.s.Invalidate(key)
	return nil
}

func (h onMemory) Config() conformance.Config { return conformance.Config{} }

// addExclusiveVariants registers broken variants that no property but those each
// names may catch (TestBrokenBackendsAreReported checks both ways, and
// GUIDE.md marks them "(only)").
func addExclusiveVariants(vs ...variant) {
	brokenVariants = append(brokenVariants, vs...)
	for _, v := range vs {
		exclusive[v.name] = true
	}
}
