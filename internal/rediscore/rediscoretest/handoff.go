package rediscoretest

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Waited is what an AcquireWait started by [StartWait] returned.
type Waited struct {
	Grant driver.Grant
	Err   error
}

// StartWait calls w.AcquireWait(ctx, req) in a goroutine of its own and
// returns the channel its outcome is sent on, buffered: the goroutine
// never blocks on it.
func StartWait(ctx context.Context, w driver.WaitAcquirer, req driver.AcquireRequest) <-chan Waited {
	res := make(chan Waited, 1)
	go func() {
		g, err := w.AcquireWait(ctx, req)
		res <- Waited{g, err}
	}()
	return res
}

// WantHandOff returns the grant res delivers, failing t unless it comes
// within 10 s, without error and with fence want: a waiter handed the lock
// by a release (after names that release in the messages).
func WantHandOff(t testing.TB, res <-chan Waited, want fencing.Token, after string) driver.Grant {
	t.Helper()
	select {
	case r := <-res:
		if r.Err != nil || r.Grant.Fence != want {
			t.Fatalf("AcquireWait after %s: fence %d, %v; want %d", after, r.Grant.Fence, r.Err, want)
		}
		return r.Grant
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter was not granted the lock within 10s of %s", after)
	}
	return driver.Grant{}
}
