package conformance

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the properties of the optional [driver.MultiLocker]:
// a set is taken all or nothing, each key with its own fence, and has one
// lease that no renewal extends once any key is gone.

// multiProperties are appended to the suite (see properties.go).
var multiProperties = []property{
	{"MultiAllOrNothing", "If the backend is a MultiLocker: with one key of a set held by another owner, AcquireMulti fails with a HeldError naming it and takes no key of the set; once free, it takes every key (each refused to single-key Acquire), each with a fence above the key's earlier fences, and ReleaseMulti frees them all with the fences' history kept.", testMultiAllOrNothing},
	{"MultiOneLease", "If the backend is a MultiLocker: RenewMulti extends a held set, and once one key of it is invalidated, RenewMulti fails with ErrNotHeld and a LostKeyError naming a key of the set that is gone, every time, and ReleaseMulti reports it too.", testMultiOneLease},
}

func init() { properties = append(properties, multiProperties...) }

// SetKeyer is implemented by harnesses whose backend takes sets only of
// some keys (Redis Cluster: keys of one hash slot). The MultiLocker
// properties then take their sets from it.
type SetKeyer interface {
	// SetKeys returns n distinct keys, each starting with prefix, that
	// the backend takes as one set.
	SetKeys(prefix string, n int) []string
}

// multiKeys returns n keys of one set, sorted.
func (e *env) multiKeys(name string, n int) []string {
	if sk, ok := e.h.(SetKeyer); ok {
		ks := sk.SetKeys(e.key(name)+"/", n)
		slices.Sort(ks)
		return ks
	}
	ks := make([]string, n)
	for i := range ks {
		ks[i] = e.key(fmt.Sprintf("%s-%d", name, i)) // e.key's counter keeps them sorted for n < 10
	}
	return ks
}

func testMultiAllOrNothing(t *testing.T, e *env) {
	_, m, ok := backendAs[driver.MultiLocker](t, e)
	if !ok {
		return
	}
	other, probe := e.backend(t), e.backend(t)
	ks := e.multiKeys("multi", 4)
	var before [4]fencing.Token
	var blocker driver.Grant
	for i, k := range ks { // a fence history on every key; ks[2] stays held
		g := e.grab(t, other, k)
		before[i] = g.Fence
		if i == 2 {
			blocker = g
		} else if err := other.Release(e.ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	_, err := m.AcquireMulti(e.ctx, driver.MultiRequest{Keys: ks, Owner: owner(), TTL: e.hold})
	var he *driver.HeldError
	if !errors.Is(err, fencedlock.ErrNotAcquired) || !errors.As(err, &he) || he.Key != ks[2] {
		t.Fatalf("AcquireMulti with %s held by another owner: %v; want a *HeldError naming it", quote(ks[2]), err)
	}
	for _, k := range []string{ks[0], ks[1], ks[3]} {
		if e.heldOn(t, probe, k) {
			t.Fatalf("a refused AcquireMulti left %s taken: a partial grant", quote(k))
		}
	}
	if err := other.Release(e.ctx, blocker); err != nil {
		t.Fatalf("Release: %v", err)
	}

	mg, err := m.AcquireMulti(e.ctx, driver.MultiRequest{Keys: ks, Owner: owner(), TTL: e.hold})
	if err != nil {
		t.Fatalf("AcquireMulti of a free set: %v", err)
	}
	if len(mg.Fences) != len(ks) {
		t.Fatalf("AcquireMulti granted %d fences for %d keys", len(mg.Fences), len(ks))
	}
	for i, k := range ks {
		if mg.Fences[i] <= before[i] {
			t.Errorf("fence of %s in the set = %v, want above its earlier fence %v", quote(k), mg.Fences[i], before[i])
		}
		if !e.heldOn(t, probe, k) {
			t.Errorf("%s of a granted set is not held", quote(k))
		}
	}
	if err := m.ReleaseMulti(e.ctx, mg); err != nil {
		t.Fatalf("ReleaseMulti: %v", err)
	}
	for i, k := range ks {
		g := e.grab(t, probe, k)
		if g.Fence <= mg.Fences[i] {
			t.Errorf("fence of %s after the set = %v, want above the set's %v", quote(k), g.Fence, mg.Fences[i])
		}
		if err := probe.Release(e.ctx, g); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func testMultiOneLease(t *testing.T, e *env) {
	_, m, ok := backendAs[driver.MultiLocker](t, e)
	if !ok {
		return
	}
	ks := e.multiKeys("multi-lease", 3)
	mg, err := m.AcquireMulti(e.ctx, driver.MultiRequest{Keys: ks, Owner: owner(), TTL: e.hold})
	if err != nil {
		t.Fatalf("AcquireMulti: %v", err)
	}
	if _, err := m.RenewMulti(e.ctx, mg, e.hold); err != nil {
		t.Fatalf("RenewMulti of a held set: %v", err)
	}
	if err := e.h.Invalidate(e.ctx, ks[1]); err != nil {
		t.Fatalf("Invalidate(%s): %v", quote(ks[1]), err)
	}
	probe := e.backend(t)
	for range 2 { // a lost set stays lost
		_, err := m.RenewMulti(e.ctx, mg, e.hold)
		e.wantLostKey(t, probe, err, ks, "RenewMulti after "+quote(ks[1])+" was invalidated")
	}
	err = m.ReleaseMulti(e.ctx, mg)
	e.wantLostKey(t, probe, err, ks, "ReleaseMulti after "+quote(ks[1])+" was invalidated")
}

// wantLostKey fails t unless err wraps ErrNotHeld and a *LostKeyError
// naming a key of ks that is indeed free (Invalidate may end more than
// the key it names: on etcd it revokes the holder's lease, which carries
// the whole set).
func (e *env) wantLostKey(t *testing.T, probe driver.Backend, err error, ks []string, why string) {
	t.Helper()
	var lk *driver.LostKeyError
	if !errors.Is(err, fencedlock.ErrNotHeld) || !errors.As(err, &lk) || !slices.Contains(ks, lk.Key) {
		t.Fatalf("%s: %v; want ErrNotHeld and a *LostKeyError naming a key of the set (one lease for the set)", why, err)
	}
	if e.heldOn(t, probe, lk.Key) {
		t.Fatalf("%s: the error names %s, which is still held: not the key lost", why, quote(lk.Key))
	}
}
