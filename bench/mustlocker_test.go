package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
)

// mustLocker returns fencedlock.New(b, opts), failing the test if New
// rejects the options.
func mustLocker(t testing.TB, b fencedlock.Backend, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	l, err := fencedlock.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
