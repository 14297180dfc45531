package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// This file holds the property of the optional [driver.RWInspector]: what
// InspectRW reports agrees with the leases the RWLocker granted.

func init() {
	properties = append(properties, property{"RWInspect",
		"If the backend is an RWInspector: InspectRW reports each live reader and the writer with its holder id (never the owner token), its fence and a remaining TTL within the lease, readers by fence ascending, a refused writer's live intent, the last fence (or 0) not below any granted; a released lease and an expired one are not reported; InspectRW changes nothing (the holders still renew).",
		testRWInspect})
}

func testRWInspect(t *testing.T, e *env) {
	if !implements[driver.RWInspector](t, e) {
		return
	}
	rws, ok := e.rwLockers(t, 3)
	if !ok {
		return
	}
	ins := rws[0].(driver.RWInspector)
	key := e.key("rw-inspect")
	if info := e.inspectRW(t, ins, key); info.Held() || info.Intents != 0 {
		t.Fatalf("InspectRW of a name never taken: %+v, want no lease and no intent", info)
	}
	r1 := e.rwGrant(t, rws[0], key, driver.Read, "a reader of a free name")
	r2 := e.rwGrant(t, rws[1], key, driver.Read, "a second reader")
	short := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.ttl}, Mode: driver.Read}
	r3, err := rws[2].AcquireRW(e.ctx, short)
	if err != nil {
		t.Fatalf("a third reader, of lease %v: %v", e.ttl, err)
	}
	r3got := time.Now()
	info := e.inspectRW(t, ins, key)
	if info.Writer != nil {
		t.Fatalf("InspectRW reports a writer %+v while only readers hold the name", *info.Writer)
	}
	e.rwReported(t, info, r1, "a live reader")
	e.rwReported(t, info, r2, "a live reader")
	for _, g := range []driver.Grant{r1, r2} { // InspectRW changed nothing
		if _, err := rws[2].RenewRW(e.ctx, g, driver.Read, e.hold); err != nil {
			t.Fatalf("RenewRW of a reader after InspectRW: %v", err)
		}
	}
	e.rwRelease(t, rws[1], r2, driver.Read)
	info = e.inspectRW(t, ins, key)
	e.rwReported(t, info, r1, "the reader left")
	if rwFind(info.Readers, r2) >= 0 {
		t.Fatalf("InspectRW reports the released reader (fence %v): %+v", r2.Fence, info.Readers)
	}
	e.rwExpiredGone(t, ins, r3, r3got)
	e.rwRefused(t, rws[2], key, driver.Write, e.hold, "a writer while a reader holds")
	if info = e.inspectRW(t, ins, key); info.Intents != 1 {
		t.Fatalf("InspectRW after one writer was refused with an intent of %v: %d intents, want 1", e.hold, info.Intents)
	}
	e.rwRelease(t, rws[0], r1, driver.Read)
	e.rwInspectWriter(t, rws, ins)
}

// rwInspectWriter checks InspectRW of a name held by a writer, then freed.
func (e *env) rwInspectWriter(t *testing.T, rws []driver.RWLocker, ins driver.RWInspector) {
	t.Helper()
	key := e.key("rw-inspect-writer")
	w := e.rwGrant(t, rws[1], key, driver.Write, "a writer of a free name")
	info := e.inspectRW(t, ins, key)
	if info.Writer == nil || len(info.Readers) != 0 {
		t.Fatalf("InspectRW while a writer holds: %+v, want the writer and no reader", info)
	}
	e.rwLeaseIs(t, info, *info.Writer, w, "the writer")
	if _, err := rws[2].RenewRW(e.ctx, w, driver.Write, e.hold); err != nil {
		t.Fatalf("RenewRW of the writer after InspectRW: %v", err)
	}
	e.rwRelease(t, rws[0], w, driver.Write)
	if info = e.inspectRW(t, ins, key); info.Held() {
		t.Fatalf("InspectRW after the writer's release: %+v, want no lease", info)
	}
}

// rwExpiredGone checks that g, a reader of lease e.ttl granted at got and
// not renewed, is no longer reported once it expired (polled until well
// past its deadline, for backends whose leases end a little late).
func (e *env) rwExpiredGone(t *testing.T, ins driver.RWInspector, g driver.Grant, got time.Time) {
	t.Helper()
	time.Sleep(time.Until(got.Add(e.ttl)))
	deadline := got.Add(4 * e.ttl)
	for {
		info := e.inspectRW(t, ins, g.Key)
		if rwFind(info.Readers, g) < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("InspectRW still reports a reader of lease %v, not renewed, %v after its grant: %+v",
				e.ttl, time.Since(got).Round(time.Millisecond), info.Readers)
		}
		time.Sleep(e.pollInterval())
	}
}

// inspectRW is InspectRW of key, failing t on an error; it also checks
// the promises of every report: readers by fence ascending, no remaining
// TTL outside (0, e.hold], Fence (where kept) not below a reported lease's.
func (e *env) inspectRW(t *testing.T, ins driver.RWInspector, key string) driver.RWInfo {
	t.Helper()
	info, err := ins.InspectRW(e.ctx, key)
	if err != nil {
		t.Fatalf("InspectRW(%s): %v", quote(key), err)
	}
	leases := slices.Clone(info.Readers)
	if info.Writer != nil {
		leases = append(leases, *info.Writer)
	}
	for i, l := range leases {
		if l.TTL <= 0 || l.TTL > e.hold {
			t.Fatalf("InspectRW reports a lease (fence %v) with remaining TTL %v, want within (0, %v]", l.Fence, l.TTL, e.hold)
		}
		if info.Fence != 0 && l.Fence > info.Fence {
			t.Fatalf("InspectRW reports last fence %v below a live lease's %v", info.Fence, l.Fence)
		}
		if i > 0 && i < len(info.Readers) && l.Fence <= leases[i-1].Fence {
			t.Fatalf("InspectRW's readers are not by fence ascending: %+v", info.Readers)
		}
	}
	return info
}

// rwReported fails t unless the reader g is among info's readers as
// rwLeaseIs says.
func (e *env) rwReported(t *testing.T, info driver.RWInfo, g driver.Grant, what string) {
	t.Helper()
	i := rwFind(info.Readers, g)
	if i < 0 {
		t.Fatalf("InspectRW does not report %s (fence %v): readers %+v", what, g.Fence, info.Readers)
	}
	e.rwLeaseIs(t, info, info.Readers[i], g, what)
}

// rwLeaseIs fails t unless l, reported by InspectRW, is g's lease: g's
// holder id (not its owner token), fence, and a TTL within g's lease.
func (e *env) rwLeaseIs(t *testing.T, info driver.RWInfo, l driver.RWLease, g driver.Grant, what string) {
	t.Helper()
	switch {
	case l.Holder == g.Owner:
		t.Fatalf("InspectRW returns the owner token of %s", what)
	case l.Holder != driver.HolderID(g.Owner):
		t.Fatalf("InspectRW reports %s with holder %q, want its HolderID %q", what, l.Holder, driver.HolderID(g.Owner))
	case l.Fence != g.Fence:
		t.Fatalf("InspectRW reports %s with fence %v, granted %v", what, l.Fence, g.Fence)
	case info.Fence != 0 && info.Fence < g.Fence:
		t.Fatalf("InspectRW reports last fence %v, below %s's %v", info.Fence, what, g.Fence)
	}
}

// rwFind returns the index of g's lease (by holder id) in ls, or -1.
func rwFind(ls []driver.RWLease, g driver.Grant) int {
	return slices.IndexFunc(ls, func(l driver.RWLease) bool { return l.Holder == driver.HolderID(g.Owner) })
}
