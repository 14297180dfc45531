package fencedlock_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// stopKeeper is a keeper (see lifecycle_test.go) that is also a
// driver.KeepAliveStopper: its stop func ends the keepalive at once, while
// the end of the lease's context ends it only after linger. Its Release
// records whether the keepalive had stopped, and how, when it was called.
type stopKeeper struct {
	*keeper
	mu      sync.Mutex
	stopped string // "": running; "stop": by the stop func; "ctx": by the context's end
	atRel   string // stopped, when Release was called
}

func (k *stopKeeper) KeepAliveStop(ctx context.Context, g driver.Grant) (<-chan driver.Renewal, func()) {
	out, ended := make(chan driver.Renewal), make(chan struct{})
	end := func(how string) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.stopped == "" {
			k.stopped = how
			close(out)
			close(ended)
		}
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-ended:
			return
		}
		t := time.NewTimer(k.linger)
		defer t.Stop()
		select {
		case <-t.C:
			end("ctx")
		case <-ended:
		}
	}()
	return out, func() { end("stop") }
}

func (k *stopKeeper) Release(ctx context.Context, g driver.Grant) error {
	k.mu.Lock()
	k.atRel = k.stopped
	k.mu.Unlock()
	return k.keeper.Release(ctx, g)
}

// TestReleaseStopsKeepAlive: with a driver.KeepAliveStopper, Release stops
// the lease's keepalive itself before it deletes the key, and so does not
// wait for the backend to see the lease's context end.
func TestReleaseStopsKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &stopKeeper{keeper: newKeeper(time.Second)}
		_, ls, _ := acquire3s(t, k)
		start := time.Now()
		if err := ls.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if k.atRel != "stop" {
			t.Errorf("the backend's Release was called with the keepalive stopped by %q, want by the stop func", k.atRel)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("Release took %v (of synctest's clock), want 0: it waited for the keepalive's context to end it", took)
		}
		if info, _ := k.Backend.Inspect(t.Context(), "k"); info.Held {
			t.Fatal("key still held after Release")
		}
	})
}
