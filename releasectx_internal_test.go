package fencedlock

import (
	"context"
	"testing"
	"time"
)

// TestReleaseClockBound: Releases that start within a slot (timeout/32)
// share one deadline context, each bounded by between 31/32 of the
// timeout and all of it; a Release past the slot gets a new one; a caller
// whose clock reading is older than the shared deadline allows gets one of
// its own and does not move the shared one back.
func TestReleaseClockBound(t *testing.T) {
	const timeout = 320 * time.Millisecond // slot: 10ms
	c := releaseClock{timeout: timeout}
	t0 := time.Now()
	check := func(ctx context.Context, now time.Time) time.Time {
		t.Helper()
		d, ok := ctx.Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		if left := d.Sub(now); left > timeout || left <= timeout-timeout/releaseSlots {
			t.Fatalf("bound %v from its start, want in (%v, %v]", left, timeout-timeout/releaseSlots, timeout)
		}
		return d
	}
	a := c.bound(t0)
	check(a, t0)
	b := c.bound(t0.Add(9 * time.Millisecond))
	check(b, t0.Add(9*time.Millisecond))
	if a != b {
		t.Error("Releases 9ms apart (slot 10ms) do not share their deadline")
	}
	n := c.bound(t0.Add(10 * time.Millisecond))
	if n == a {
		t.Error("a Release 10ms later (slot 10ms) shares a deadline less than 31/32 of the timeout away")
	}
	check(n, t0.Add(10*time.Millisecond))
	late := c.bound(t0.Add(-time.Millisecond)) // read the clock before the others
	check(late, t0.Add(-time.Millisecond))
	if late == n {
		t.Error("an older clock reading shares a deadline past its bound")
	}
	if c.cur.Load().ctx != n {
		t.Error("an older clock reading moved the shared deadline back")
	}
	if a.Err() != nil || context.Cause(a) != nil {
		t.Fatal("a shared deadline context ended before its deadline")
	}
}

type ctxKey struct{}

// TestReleaseContext: Release's context keeps the caller's values, not
// its cancellation, has the shared bound as its deadline and ends with
// it; a context derived from it (as a client derives one per request)
// ends with it too.
func TestReleaseContext(t *testing.T) {
	c := releaseClock{timeout: 64 * time.Millisecond}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	cancel()
	rc := &releaseCtx{parent: detached(parent), bound: c.bound(time.Now())}
	if rc.Value(ctxKey{}) != "v" {
		t.Errorf("Value = %v, want the caller's", rc.Value(ctxKey{}))
	}
	if rc.Err() != nil {
		t.Fatalf("Err = %v: the caller's cancellation reached the release", rc.Err())
	}
	if d, ok := rc.Deadline(); !ok || time.Until(d) > 64*time.Millisecond {
		t.Fatalf("Deadline = %v, %v", d, ok)
	}
	child, stop := context.WithCancel(rc)
	defer stop()
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a context derived from the release context did not end with its deadline")
	}
	<-rc.Done()
	if rc.Err() != context.DeadlineExceeded || context.Cause(child) != context.DeadlineExceeded {
		t.Fatalf("Err = %v, child's cause %v, want DeadlineExceeded", rc.Err(), context.Cause(child))
	}
}
