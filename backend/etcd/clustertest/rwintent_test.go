package clustertest

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// TestRefusedWriterKeepsOneIntentLease: a writer refused while a reader
// holds the name puts its intent on a lease of its own at every attempt
// (the intent must outlast the attempt by Intent); the lease of the
// attempt before, which the Txn left empty, is revoked, not left to
// expire. A waiting writer attempts again at every reader's release: 10
// refused attempts left 10 leases of 10 s each before.
func TestRefusedWriterKeepsOneIntentLease(t *testing.T) {
	e := newEnv(t)
	b := e.backend(0)
	ctx := t.Context()
	const key, attempts = "intent-leases", 10
	r, err := b.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: key, Owner: "reader-owner-token", TTL: 10 * time.Second}, Mode: driver.Read})
	if err != nil {
		t.Fatal(err)
	}
	before := e.allLeases()
	w := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: key, Owner: "writer-owner-token", TTL: 10 * time.Second}, Mode: driver.Write, Intent: 10 * time.Second}
	for i := range attempts {
		var held *driver.HeldError
		if _, err := b.AcquireRW(ctx, w); !errors.As(err, &held) {
			t.Fatalf("writer's attempt %d while a reader holds %q: %v, want a *driver.HeldError", i+1, key, err)
		}
	}
	if n := e.settledLeases(before + 1); n != before+1 {
		t.Errorf("%d leases more after %d refused attempts of one writer, want 1 (its intent's)", n-before, attempts)
	}
	// Granted, the writer deletes its intent: that lease goes too. The
	// reader's lease is revoked by its release, the writer's replaces it.
	if err := b.ReleaseRW(ctx, r, driver.Read); err != nil {
		t.Fatal(err)
	}
	g, err := b.AcquireRW(ctx, w)
	if err != nil {
		t.Fatalf("writer's attempt once the reader released: %v", err)
	}
	if n := e.settledLeases(before); n != before {
		t.Errorf("%d leases more once the writer holds %q, want 0 (its own lease, in place of the reader's)", n-before, key)
	}
	if err := b.ReleaseRW(ctx, g, driver.Write); err != nil {
		t.Fatal(err)
	}
}

// settledLeases waits up to 5 s (revocations run in the background) for
// the cluster's lease count to fall to want, and returns the last count.
func (e *env) settledLeases(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := e.allLeases()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}
