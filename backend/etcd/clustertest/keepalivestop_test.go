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
