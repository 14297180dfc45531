// Package locktest holds the test helpers every package of the module
// shares (the root's tests, the backends', the conformance suite, the
// CLI's, the benchmarks'), so that each package does not keep its own
// copy.
package locktest

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// New returns fencedlock.New(b, opts), failing t (with the error of New)
// if New refuses the options.
func New(t testing.TB, b driver.Backend, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	l, err := fencedlock.New(b, opts)
	if err != nil {
		t.Fatalf("fencedlock.New: %v", err)
	}
	return l
}
