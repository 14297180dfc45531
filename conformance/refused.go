package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
)

// WriteRefuser is implemented by harnesses that can make the store refuse
// every write for a while and still answer reads, as a store over its
// memory limit (Redis's maxmemory with noeviction), a read-only replica
// or a full disk does. The WriteRefused property uses it to check that
// such a refusal of Acquire's write is reported as an error, not as a
// grant the store did not record nor as "held by another" for a free key.
type WriteRefuser interface {
	// RefuseWrites makes the store refuse, while on, every request that
	// would write (an Acquire taking a free key); reads are answered.
	RefuseWrites(ctx context.Context, on bool) error
}

func testWriteRefused(t *testing.T, e *env) {
	wr, ok := harnessIs[WriteRefuser](t, e)
	if !ok {
		return
	}
	b, probe := e.backend(t), e.backend(t)
	held := e.grab(t, b, e.key("held"))
	free := driver.AcquireRequest{Key: e.key("free"), Owner: owner(), TTL: e.hold}
	refuse := func(on bool) {
		t.Helper()
		if err := wr.RefuseWrites(context.WithoutCancel(e.ctx), on); err != nil {
			t.Fatalf("harness RefuseWrites(%t): %v", on, err)
		}
	}
	refuse(true)
	t.Cleanup(func() { _ = wr.RefuseWrites(context.Background(), false) })
	g, errFree := b.Acquire(e.ctx, free)
	_, errHeld := b.Acquire(e.ctx, driver.AcquireRequest{Key: held.Key, Owner: owner(), TTL: e.hold})
	refuse(false)
	switch {
	case errFree == nil:
		t.Fatalf("Acquire of a free key while the store refuses writes: granted fence %v, want an error (the store recorded no lock)", g.Fence)
	case errors.Is(errFree, driver.ErrNotAcquired):
		t.Fatalf("Acquire of a free key while the store refuses writes: %v: reported held by another, want the store's refusal (the key is free: a Locker would wait for a holder that does not exist)", errFree)
	}
	if errHeld == nil {
		t.Fatalf("Acquire of a key held by another while the store refuses writes: granted, want ErrNotAcquired or the store's refusal")
	}
	noSecret(t, "the refused Acquire's error", errFree.Error(), free.Owner)
	// The store's state afterwards: the free key was not taken (the
	// owner's clean-up, as the Locker sends after such an error, finds
	// nothing or frees it), the held key is still its holder's.
	if e.heldOn(t, probe, free.Key) {
		t.Fatalf("%s held after an Acquire the store refused", quote(free.Key))
	}
	if err := b.Release(e.ctx, driver.Grant{Key: free.Key, Owner: free.Owner}); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the owner's Release after a refused Acquire: %v", err)
	}
	e.mustBeHeld(t, b, &held, "after another owner's Acquire while the store refused writes")
	e.mustRelease(t, b, held)
	t.Logf("while the store refused writes: Acquire of a free key: %v; of a held key: %v", errFree, errHeld)
}
