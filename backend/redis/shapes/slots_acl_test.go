package shapes_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// TestTLSAndACLSlots: the semaphore's one-step permit
// (slot_acquire.lua) needs nothing beyond the lock's rule
// (docs/redis-acl.md): over TLS as that user it takes the first free
// slot, reports all held, gives an owner its own slot again, and is
// refused after its owner's clean-up, with no denial in ACL LOG.
func TestTLSAndACLSlots(t *testing.T) {
	srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", aclPerms))
	b := newBackend(t, c, redis.Options{})
	ctx := ctxT(t, 20*time.Second)
	keys := []string{"sem/permit/0", "sem/permit/1"}
	req := func(owner string) driver.AcquireRequest {
		return driver.AcquireRequest{Owner: owner, TTL: time.Minute}
	}
	for i, owner := range []string{"acl-a", "acl-b"} {
		slot, g, err := b.AcquireSlot(ctx, req(owner), keys)
		if err != nil || slot != i || g.Key != keys[i] {
			t.Fatalf("AcquireSlot by %s = %d, %v, %v; want slot %d", owner, slot, g.Key, err, i)
		}
	}
	if slot, _, err := b.AcquireSlot(ctx, req("acl-a"), keys); err != nil || slot != 0 {
		t.Fatalf("AcquireSlot again by slot 0's owner = %d, %v; want slot 0", slot, err)
	}
	var he *driver.HeldError
	if _, _, err := b.AcquireSlot(ctx, req("acl-c"), keys); !errors.As(err, &he) || he.RetryAfter <= 0 {
		t.Fatalf("AcquireSlot with both held = %v; want a HeldError with the holders' TTL", err)
	}
	for _, k := range keys { // the clean-up of an attempt of unknown outcome
		if err := b.Release(ctx, driver.Grant{Key: k, Owner: "acl-d"}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("clean-up Release of %s: %v", k, err)
		}
	}
	if err := b.Release(ctx, driver.Grant{Key: keys[1], Owner: "acl-b", Fence: 1}); err != nil { // a plain release (Fence not 0) frees slot 1
		t.Fatal(err)
	}
	if _, _, err := b.AcquireSlot(ctx, req("acl-d"), keys); !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("AcquireSlot after its owner's clean-up = %v; want ErrNotAcquired", err)
	}
	if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
		t.Fatalf("ACL LOG records denials:\n%s", out)
	}
}
