package conformance

// Residue (RecordLister harnesses): nothing the backend writes for a lock
// stays on the store for ever, apart from its fence record.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// RecordLister is implemented by harnesses that can list what the store
// holds for a key (a Redis harness: a SCAN of the key's names). The
// Residue property uses it to check that nothing the backend writes for a
// lock stays on the store for ever but the fence record, which must: a
// record without an expiry written by every clean-up or wait grows the
// store with every owner that ever used the key, and nothing ever
// removes it.
type RecordLister interface {
	// Records describes every record the store holds for key apart from
	// its fence record: its lock, a queue of waiters, a set of abandoned
	// owners, whatever the backend keeps there.
	Records(ctx context.Context, key string) ([]Record, error)
}

// Record is one record the store holds for a key (see [RecordLister]).
type Record struct {
	Name    string // the store's name for it (a Redis key)
	Expires bool   // whether the store deletes it by itself (it has a TTL)
}

// String describes r for a report.
func (r Record) String() string {
	if r.Expires {
		return r.Name + " (expires)"
	}
	return r.Name + " (never expires)"
}

// testResidue takes a key through every way the contract lets a lock be
// used, and after each step requires every record the store holds for it
// (but its fence record) to expire: a grant and its release; the
// clean-up Release of Grant{Key, Owner} (an Acquire whose outcome is
// unknown) of a holder, of an owner whose Acquire never arrived, and of
// one while another owner holds the key; and, for a WaitAcquirer, a
// waiter that gave up.
func testResidue(t *testing.T, e *env) {
	rl, ok := harnessIs[RecordLister](t, e)
	if !ok {
		return
	}
	key := e.key("residue")
	b := e.backend(t)
	seen := map[string]bool{}
	defer func() { t.Logf("records seen: %v", slices.Sorted(maps.Keys(seen))) }()
	check := func(after string) {
		t.Helper()
		recs, err := rl.Records(e.ctx, key)
		if err != nil {
			t.Fatalf("Records after %s: %v", after, err)
		}
		for _, r := range recs {
			seen[r.Name] = true
			if !r.Expires {
				t.Fatalf("after %s the store holds %v for the key (all: %v): a record that never expires, apart from the fence record, stays for good, and one written on every use grows the store without bound", after, r, recs)
			}
		}
	}
	acquire := func(o string) driver.Grant {
		t.Helper()
		g, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: o, TTL: e.hold})
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return g
	}
	release := func(g driver.Grant, mayBeNotHeld bool) {
		t.Helper()
		if err := b.Release(e.ctx, g); err != nil && !(mayBeNotHeld && errors.Is(err, fencedlock.ErrNotHeld)) {
			t.Fatalf("Release of %s: %v", describeGrant(g), err)
		}
	}

	g := acquire(owner())
	check("a grant")
	release(g, false)
	check("its release")

	o := owner()
	acquire(o) // its grant is lost: the clean-up below is all its owner has
	release(driver.Grant{Key: key, Owner: o}, false)
	check("the clean-up Release of Grant{Key, Owner} of the holder (an Acquire whose outcome was unknown)")

	release(driver.Grant{Key: key, Owner: owner()}, true)
	check("the clean-up Release of Grant{Key, Owner} of an owner whose Acquire never arrived")

	g = acquire(owner())
	release(driver.Grant{Key: key, Owner: owner()}, true)
	check("the clean-up Release of Grant{Key, Owner} of another owner while the key is held")
	release(g, false)
	check("the holder's release after another owner's clean-up")

	if _, ok := b.(driver.WaitAcquirer); !ok {
		return
	}
	g = acquire(owner())
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.QueueDelay)
	if wg, err := b.(driver.WaitAcquirer).AcquireWait(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}); err == nil {
		cancel()
		t.Fatalf("AcquireWait of a held key granted it (fence %d)", wg.Fence)
	}
	cancel()
	check("a waiter that gave up while the key was held")
	release(g, false)
	check("the release after a waiter gave up")
	time.Sleep(e.cfg.QueueDelay)
	check(fmt.Sprintf("%v more", e.cfg.QueueDelay))
}

// describeGrant names g for a report, without its owner token.
func describeGrant(g driver.Grant) string {
	if g.Fence == 0 {
		return "Grant{Key, Owner} (a clean-up)"
	}
	return fmt.Sprintf("the grant of fence %d", g.Fence)
}
