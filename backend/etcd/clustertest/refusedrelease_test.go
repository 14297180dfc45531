package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// TestRefusedReleaseRevokesLease checks, on a real connection fault, what
// conformance's StoreFaults accepts without looking (conformance/GUIDE.md:
// "key held or free after a refused Release"): a Release whose Txn the
// connection refused returns a transient error, and the backend then
// revokes that grant's lease in the background once the member answers
// again, which frees the key long before its TTL and touches no other key
// (every grant has a lease of its own). The owner's Release afterwards
// reports ErrNotHeld and leaves the key free.
func TestRefusedReleaseRevokesLease(t *testing.T) {
	e := newEnv(t)
	h := &conformanceHarness{e: e}
	ctx := ctxFor(t, time.Minute)
	b, f, err := h.NewFaultyBackend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const long = 30 * time.Second // freed within this by the revoke, not by expiry
	acquire := func(key, owner string) driver.Grant {
		t.Helper()
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner, TTL: long})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := acquire("released", "owner-refused-0123456789")
	other := acquire("other", "owner-other-0123456789")

	f.Refuse(true)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	refused := b.Release(rctx, g)
	cancel()
	// Checked while still refused: the revoke goes out as soon as the
	// connection works again.
	n := len(e.entries(g.Key))
	f.Refuse(false)
	healed := time.Now()
	if refused == nil || errors.Is(refused, driver.ErrNotHeld) || errors.Is(refused, driver.ErrPermanent) {
		t.Fatalf("Release refused by the connection: %v, want a transient error", refused)
	}
	if n != 1 {
		t.Fatalf("%d entries under %q after the refused Release, want 1 (nothing reached the member)", n, g.Key)
	}

	// The revocation is retried by the client within CleanupTimeout (5s);
	// the key must be free well before its 30s TTL.
	for len(e.entries(g.Key)) != 0 {
		if time.Since(healed) > long/2 {
			t.Fatalf("%q still held %v after the connection healed: the background revoke did not free it", g.Key, long/2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	freed := time.Since(healed)
	if n := len(e.entries(other.Key)); n != 1 {
		t.Fatalf("%d entries under %q after the revoke of another grant's lease, want 1", n, other.Key)
	}
	if _, err := b.Renew(ctx, other, long); err != nil {
		t.Fatalf("Renew of the other grant after the revoke: %v", err)
	}
	err = b.Release(ctx, g)
	if !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the owner's Release after the background revoke: %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Logf("refused Release: %v; key freed by the background revoke %v after the connection healed (TTL %v); other key kept and renewed; owner's Release then: %v", refused, ms(freed), long, err)
}
