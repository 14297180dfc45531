package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// TestKeepAliveStop: the stop func of KeepAliveStop ends the keepalive
// before it returns: the channel is closed by then (after at most the one
// Renewal already buffered), while the keepalive's context is still live;
// a second stop, and the end of the context after it, do nothing more.
// The lease, no longer renewed, is released as usual.
func TestKeepAliveStop(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	ctx := ctxFor(t, time.Minute)
	req := driver.AcquireRequest{Key: "k", Owner: "owner-keepalivestop-0123", TTL: ttl}
	g, err := b.AcquireWait(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, stop := b.KeepAliveStop(kctx, g)
	stop()
	for closed := false; !closed; {
		select {
		case r, ok := <-ch:
			if !ok {
				closed = true
			} else if r.Err != nil {
				t.Fatalf("keepalive reported %v", r.Err)
			}
		default:
			t.Fatal("the keepalive's channel is still open after stop returned")
		}
	}
	stop()
	cancel()
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("release after the keepalive stopped: %v", err)
	}
}

// TestKeepAliveInterval: the keepalive renews at the interval the request
// asked for (AcquireRequest.RenewInterval, the Locker's RenewInterval),
// TTL/3 when it asked for none: consecutive confirmed renewals were sent
// at least that far apart (never closer: one lease at a time, so no other
// renewal due pulls it early; a loaded machine only spaces them more), for
// a holder's lease and for one granted through the queue.
// Before the interval was passed on, a lease of TTL 3s asked to renew
// every 2s was renewed every 1s.
func TestKeepAliveInterval(t *testing.T) {
	e := newEnv(t)
	b := e.backend(1)
	for _, c := range []struct {
		name  string
		every time.Duration // asked for; 0: the default
		want  time.Duration
		wait  bool
	}{
		{"asked", 2 * time.Second, 2 * time.Second, false},
		{"asked-queued", 2 * time.Second, 2 * time.Second, true},
		{"default", 0, time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			req := driver.AcquireRequest{Key: "interval-" + c.name, Owner: "owner-interval-0123456789", TTL: 3 * time.Second, RenewInterval: c.every}
			var g driver.Grant
			var err error
			if c.wait {
				g, err = b.AcquireWait(ctx, req)
			} else {
				g, err = b.Acquire(ctx, req)
			}
			if err != nil {
				t.Fatal(err)
			}
			kctx, cancel := context.WithCancel(ctx)
			ch, stop := b.KeepAliveStop(kctx, g)
			prev := g.Sent
			for i := range 2 {
				r, ok := <-ch
				if !ok || r.Err != nil {
					t.Fatalf("renewal %d: %v (open %v)", i, r.Err, ok)
				}
				if gap := r.Sent.Sub(prev); gap < c.want-5*time.Millisecond {
					t.Errorf("renewal %d sent %v after the previous one, want at least %v", i, gap, c.want)
				}
				prev = r.Sent
			}
			stop()
			cancel()
			if err := b.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		})
	}
}
