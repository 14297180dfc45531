package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the properties of the optional [driver.Elector]: terms
// are leases on the election's key, values belong to their term, and
// WatchLeader delivers the changes of leader in order.

// electionProperties are appended to the suite (see properties.go).
var electionProperties = []property{
	{"ElectionProclaim", "If the backend is an Elector: Proclaim stores a value only for the live term with its fence and holder id, Leader reports that term (fence, holder, value, TTL) and no other, a late Proclaim of an ended term (released, invalidated) is refused with ErrNotHeld and never shows two leaders in one term, and Leader reports none once the term ended.", testElectionProclaim},
	{"ElectionFences", "If the backend is an Elector: the fences Leader reports for successive terms of a key, led from several backends and ended by release, invalidation and expiry, are the terms' lease fences and strictly increasing.", testElectionFences},
	{"ElectionObserve", "If the backend is an Elector: WatchLeader delivers the state when it starts, then every term beginning and ending in order, never a term below one it delivered (or marks Missed), with each term's value, and ends when stopped; a term whose lease was granted before the watch began and that begins and ends before the watcher reads is delivered or reported Missed.", testElectionObserve},
}

// lead takes key on b and proclaims value for the grant: one term.
func (e *env) lead(t *testing.T, b driver.Backend, key, value string, ttl time.Duration) driver.Grant {
	t.Helper()
	g := e.grabTTL(t, b, key, ttl)
	if err := b.(driver.Elector).Proclaim(e.ctx, key, g.Fence, driver.HolderID(g.Owner), []byte(value)); err != nil {
		t.Fatalf("Proclaim(%s, fence %v) by the holder: %v", quote(key), g.Fence, err)
	}
	return g
}

// wantLeader fails t unless el reports key's term g with value.
func (e *env) wantLeader(t *testing.T, el driver.Elector, g driver.Grant, value, why string) {
	t.Helper()
	info, err := el.Leader(e.ctx, g.Key)
	switch {
	case err != nil:
		t.Fatalf("%s: Leader(%s): %v", why, quote(g.Key), err)
	case !info.Held || info.Fence != g.Fence || info.Holder != driver.HolderID(g.Owner) || string(info.Value) != value:
		t.Fatalf("%s: Leader(%s) = held %v, fence %v, holder %s, value %q; want the term of fence %v, holder %s, value %q (two leaders in one term, or a wrong term)",
			why, quote(g.Key), info.Held, info.Fence, info.Holder, info.Value, g.Fence, driver.HolderID(g.Owner), value)
	case info.TTL <= 0 || info.TTL > grantTTL(g.TTL, e.hold)+time.Second:
		t.Fatalf("%s: Leader(%s).TTL = %v, want within (0, %v]", why, quote(g.Key), info.TTL, grantTTL(g.TTL, e.hold))
	}
}

// wantNoLeader fails t unless el reports no term of key.
func (e *env) wantNoLeader(t *testing.T, el driver.Elector, key, why string) {
	t.Helper()
	info, err := el.Leader(e.ctx, key)
	if err != nil {
		t.Fatalf("%s: Leader(%s): %v", why, quote(key), err)
	}
	if info.Held {
		t.Fatalf("%s: Leader(%s) reports the term of fence %v, value %q; want none", why, quote(key), info.Fence, info.Value)
	}
}

func testElectionProclaim(t *testing.T, e *env) {
	b1, el1, ok := backendAs[driver.Elector](t, e)
	if !ok {
		return
	}
	b2 := e.backend(t)
	el2 := b2.(driver.Elector)
	key := e.key("proclaim")
	e.wantNoLeader(t, el2, key, "a key never held")
	g := e.grab(t, b1, key)
	e.wantNoLeader(t, el2, key, "a lease whose value is not proclaimed yet")
	hid := driver.HolderID(g.Owner)
	for _, c := range []struct {
		why    string
		fence  fencing.Token
		holder string
	}{{"another fence", g.Fence + 1, hid}, {"an older fence", g.Fence - 1, hid}, {"another holder id", g.Fence, driver.HolderID(owner())}} {
		if err := el2.Proclaim(e.ctx, key, c.fence, c.holder, []byte("impostor")); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Proclaim(%s) with %s than the holder's: %v, want ErrNotHeld", quote(key), c.why, err)
		}
	}
	if err := el1.Proclaim(e.ctx, key, g.Fence, hid, []byte("A")); err != nil {
		t.Fatalf("Proclaim by the holder: %v", err)
	}
	e.wantLeader(t, el2, g, "A", "after the holder's Proclaim")

	// A's term ends behind its back; B leads; A's late Proclaim must not
	// make A (or A's value) the leader during B's term.
	if err := e.h.Invalidate(e.ctx, key); err != nil {
		t.Fatalf("harness Invalidate: %v", err)
	}
	e.wantNoLeader(t, el2, key, "after the term was invalidated")
	gb := e.lead(t, b2, key, "B", e.hold)
	if err := el1.Proclaim(e.ctx, key, g.Fence, hid, []byte("A-late")); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late Proclaim of an invalidated term (fence %v) during the term of fence %v: %v, want ErrNotHeld", g.Fence, gb.Fence, err)
	}
	e.wantLeader(t, el1, gb, "B", "after a late Proclaim of the previous term")
	if err := b2.Release(e.ctx, gb); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.wantNoLeader(t, el1, key, "after the leader's Release")
	if err := el2.Proclaim(e.ctx, key, gb.Fence, driver.HolderID(gb.Owner), []byte("B-late")); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Proclaim of a released term: %v, want ErrNotHeld", err)
	}
	gc := e.grab(t, b1, key)
	e.wantNoLeader(t, el2, key, "a new lease before its Proclaim (the previous term's value must not carry over)")
	_ = b1.Release(e.ctx, gc)
}

func testElectionFences(t *testing.T, e *env) {
	if _, _, ok := backendAs[driver.Elector](t, e); !ok {
		return
	}
	bs := []driver.Backend{e.backend(t), e.backend(t), e.backend(t)}
	reader := e.backend(t).(driver.Elector)
	key := e.key("fences")
	var last fencing.Token
	for i := range 9 {
		b := bs[i%len(bs)]
		ttl := e.hold
		if i%3 == 2 {
			ttl = e.ttl // this term ends by expiry
		}
		g := e.lead(t, b, key, fmt.Sprint("term ", i), ttl)
		info, err := reader.Leader(e.ctx, key)
		if err != nil {
			t.Fatalf("Leader: %v", err)
		}
		if !info.Held || info.Fence != g.Fence {
			t.Fatalf("term %d: Leader reports held %v, fence %v; want the term's lease fence %v", i, info.Held, info.Fence, g.Fence)
		}
		if info.Fence <= last {
			t.Fatalf("term %d: fence %v is not above the previous term's %v", i, info.Fence, last)
		}
		last = info.Fence
		switch i % 3 {
		case 0:
			if err := b.Release(e.ctx, g); err != nil {
				t.Fatalf("Release: %v", err)
			}
		case 1:
			if err := e.h.Invalidate(e.ctx, key); err != nil {
				t.Fatalf("harness Invalidate: %v", err)
			}
		case 2:
			e.acquireBy(t, bs[(i+1)%len(bs)], key, time.Now().Add(grantTTL(g.TTL, ttl)+e.cfg.ExpirySlack+e.schedAllowance()), "the expired term's key")
			if err := e.h.Invalidate(e.ctx, key); err != nil { // the poll's grant, never proclaimed
				t.Fatalf("harness Invalidate: %v", err)
			}
		}
	}
}

// observedTerm is a term the ElectionObserve property led.
type observedTerm struct {
	fence fencing.Token
	value string
}

func testElectionObserve(t *testing.T, e *env) {
	_, el, ok := backendAs[driver.Elector](t, e)
	if !ok {
		return
	}
	bs := []driver.Backend{e.backend(t), e.backend(t)}
	key := e.key("observe")
	events, stop, err := el.WatchLeader(e.ctx, key)
	if err != nil {
		t.Fatalf("WatchLeader: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	var terms []observedTerm
	for i := range 6 {
		v := fmt.Sprint("leader ", i)
		g := e.lead(t, bs[i%2], key, v, e.hold)
		terms = append(terms, observedTerm{g.Fence, v})
		if i%2 == 0 {
			err = bs[i%2].Release(e.ctx, g)
		} else {
			err = e.h.Invalidate(e.ctx, key)
		}
		if err != nil {
			t.Fatalf("ending term %d: %v", i, err)
		}
	}
	got := e.collectLeaders(t, events, terms[len(terms)-1].fence)
	checkObserved(t, got, terms)
	stop()
	stopped = true
	for range events { // closed after stop; bounded by the property's timeout
		if e.ctx.Err() != nil {
			t.Fatal("WatchLeader's channel not closed after stop")
		}
	}
	e.observeGrantedBeforeWatch(t, el, bs[0])
}

// observeGrantedBeforeWatch: a lease granted before a watch starts, whose
// term begins (Proclaim) and ends (Release) while the watcher has not
// received the first event yet, is delivered, or the event after the
// first says Missed. A watch that counts the lease's grant as seen at its
// first read (no term began yet) must not take that grant as accounted
// for once the term began and ended unseen.
func (e *env) observeGrantedBeforeWatch(t *testing.T, el driver.Elector, b driver.Backend) {
	key := e.key("observe-granted")
	g := e.grabTTL(t, b, key, e.hold)
	events, stop, err := el.WatchLeader(e.ctx, key)
	if err != nil {
		t.Fatalf("WatchLeader: %v", err)
	}
	defer stop()
	if err := b.(driver.Elector).Proclaim(e.ctx, key, g.Fence, driver.HolderID(g.Owner), []byte("brief")); err != nil {
		t.Fatalf("Proclaim(%s, fence %v) by the holder: %v", quote(key), g.Fence, err)
	}
	if err := b.Release(e.ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got := e.collectLeaders(t, events, g.Fence)
	if got[0].Held {
		t.Fatalf("first event %v: a term before its Proclaim", got[0])
	}
	for _, ev := range got[1:] {
		if ev.Missed || ev.Held && ev.Fence == g.Fence && string(ev.Value) == "brief" {
			return
		}
	}
	t.Fatalf("the term of fence %v (granted before the watch, begun and ended after it) was neither delivered nor reported Missed; events %v", g.Fence, got)
}

// collectLeaders receives events until the term of fence last was seen
// ending (a state with no leader after it, or a later term), or the wait
// ends.
func (e *env) collectLeaders(t *testing.T, events <-chan driver.LeaderEvent, last fencing.Token) []driver.LeaderEvent {
	t.Helper()
	var got []driver.LeaderEvent
	wait := time.NewTimer(e.hold + e.schedAllowance())
	defer wait.Stop()
	seenLast := false
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("WatchLeader's channel closed before the last term ended; got %v", got)
			}
			got = append(got, ev)
			if ev.Held && ev.Fence >= last {
				seenLast = true
			} else if !ev.Held && (seenLast || ev.Missed) {
				return got
			}
		case <-wait.C:
			t.Fatalf("WatchLeader delivered no end of the last term (fence %v) within %v; got %v", last, e.hold, got)
		}
	}
}

// checkObserved checks events against the terms led, in order.
func checkObserved(t *testing.T, got []driver.LeaderEvent, terms []observedTerm) {
	t.Helper()
	if len(got) == 0 || got[0].Held {
		t.Fatalf("WatchLeader's first event = %v, want the state when it started (no leader)", got)
	}
	var newest fencing.Token
	for i, ev := range got {
		if ev.Held && ev.Fence <= newest {
			t.Fatalf("event %d delivers the term of fence %v after the term of fence %v (an older leader after a newer one); events %v", i, ev.Fence, newest, got)
		}
		if ev.Held {
			newest = ev.Fence
		}
	}
	next := 0 // index in terms of the next term expected
	for i, ev := range got {
		if !ev.Held {
			continue
		}
		j := next
		for j < len(terms) && terms[j].fence != ev.Fence {
			j++
		}
		if j == len(terms) {
			t.Fatalf("event %d delivers a term of fence %v that was never led; events %v", i, ev.Fence, got)
		}
		if string(ev.Value) != terms[j].value {
			t.Fatalf("event %d: the term of fence %v has value %q, want %q", i, ev.Fence, ev.Value, terms[j].value)
		}
		if j != next && !ev.Missed && !got[i-1].Missed {
			t.Fatalf("event %d: the terms of fences %v..%v were skipped without Missed; events %v", i, terms[next].fence, terms[j-1].fence, got)
		}
		next = j + 1
	}
	if next != len(terms) && !got[len(got)-1].Missed {
		t.Fatalf("the last %d terms were never delivered and no event says Missed; events %v", len(terms)-next, got)
	}
}

func init() { properties = append(properties, electionProperties...) }
