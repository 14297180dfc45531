// Package locktest holds the test helpers every package of the module
// shares (the root's tests, the backends', the conformance suite, the
// CLI's, the benchmarks'), so that each package does not keep its own
// copy.
package locktest

import (
	"context"
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

// Open returns mk(b, opts) (election.New, semaphore.New: a constructor on
// a backend with a Locker of its own), failing t if mk fails, and closes
// it, then b, when t ends.
func Open[T interface{ Close() error }](t testing.TB, b driver.Backend, opts fencedlock.Options, mk func(driver.Backend, fencedlock.Options) (T, error)) T {
	t.Helper()
	v, err := mk(b, opts)
	if err != nil {
		t.Fatalf("%T: %v", v, err)
	}
	t.Cleanup(func() { _ = v.Close(); _ = b.Close() })
	return v
}

// AcquireRelease starts a goroutine that waits for key with l and releases
// it at once; the channel gets the error of either (nil if both worked).
func AcquireRelease(ctx context.Context, l *fencedlock.Locker, key string) <-chan error {
	return AcquireThenRelease(ctx, func() (*fencedlock.Lease, error) { return l.Acquire(ctx, key) })
}
