package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// ExpiryCorrupter is implemented by harnesses that can put on the store,
// in place of key's lock, a lock record in the backend's own format, held
// by an owner no client is, that never expires: a record the backend never
// writes (every lock it writes expires), which no waiting ends. The
// ForeignValue property uses it to check that Acquire reports such a key
// with an error wrapping [driver.ErrPermanent], not as held by another,
// and changes nothing. A backend whose every lock record expires by its
// format (no record without an expiry can be stored) needs no
// ExpiryCorrupter; without one, this part of ForeignValue has nothing to
// check.
type ExpiryCorrupter interface {
	// CorruptNoExpiry replaces whatever is stored for key's lock with a
	// lock record of the backend's format, held by another owner, without
	// an expiry.
	CorruptNoExpiry(ctx context.Context, key string) error
}

// checkNoExpiry is ForeignValue's check of a lock record without an
// expiry: Acquire must fail with ErrPermanent (a Locker waiting for the
// key to be released would wait forever), twice (the first changed
// nothing).
func checkNoExpiry(t *testing.T, e *env) {
	t.Helper()
	c, ok := harnessIs[ExpiryCorrupter](t, e)
	if !ok {
		return
	}
	b := e.backend(t)
	key := e.key("no-expiry")
	if err := c.CorruptNoExpiry(e.ctx, key); err != nil {
		t.Fatalf("harness CorruptNoExpiry: %v", err)
	}
	for i := range 2 {
		_, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		if errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("Acquire %d of a key whose lock record never expires: %v: reported held by another, which the Locker would wait for forever; want an error wrapping ErrPermanent", i+1, err)
		}
		if !errors.Is(err, driver.ErrPermanent) {
			t.Fatalf("Acquire %d of a key whose lock record never expires: %v, want an error wrapping ErrPermanent (no retry helps until an operator acts)", i+1, err)
		}
	}
	t.Logf("a lock record without an expiry is reported with ErrPermanent and left as it is")
}
