package rediscore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// givenUpConn is a Conn whose first fail script commands fail the way a
// command given up on fails (its context ended first, see the go-redis
// adapter's process): the error comes back while the client still holds
// the Call and reads its arguments, here on a goroutine until stop is
// closed. Later commands reply with fence 7. Methods the test does not
// expect panic (the embedded nil Conn).
type givenUpConn struct {
	Conn
	fail  int
	stop  chan struct{}
	wg    sync.WaitGroup
	calls []*Call
	moved atomic.Bool // the client saw a held Call's ARGV[4] change
}

func (c *givenUpConn) EvalInts(_ context.Context, _ *Script, call *Call) (int64, []int64, error) {
	c.calls = append(c.calls, call)
	if len(c.calls) > c.fail {
		return 7, nil, nil
	}
	sent := call.Args[3]
	c.wg.Add(1)
	go func() { // the client, still writing the command
		defer c.wg.Done()
		for {
			select {
			case <-c.stop:
				return
			default:
				if call.Args[3] != sent {
					c.moved.Store(true)
				}
				time.Sleep(time.Microsecond)
			}
		}
	}()
	return 0, nil, errors.New("i/o timeout")
}

func (c *givenUpConn) Wrap(op, key string, err error) error {
	return fmt.Errorf("redis: %s %q: %w", op, key, err)
}

func (c *givenUpConn) Closed() bool { return false }

// TestFairStepLeavesGivenUpCall: after a wait.lua whose command failed
// while the client may still send it, the next attempt uses a new Call
// and the failed one is never written again (it said "new" when it was
// sent, and still does): the race detector saw the old code clear its
// ARGV[4] while go-redis's goroutine wrote it (bench TestSmoke under
// -race, CI of session 38).
func TestFairStepLeavesGivenUpCall(t *testing.T) {
	c := &givenUpConn{fail: 2, stop: make(chan struct{})}
	b := NewBackend(c, redisscript.Options{Logger: slog.New(slog.DiscardHandler)}, nil)
	w := b.newWait(driver.AcquireRequest{Key: "k", Owner: "owner-1", TTL: time.Second})
	ctx := context.Background()
	for i := range c.fail {
		fence, wait, err := w.step(ctx, time.Now(), true)
		if err != nil || fence != 0 || wait <= 0 {
			t.Fatalf("attempt %d: fence %d, wait %v, err %v; want a retry after a backoff", i, fence, wait, err)
		}
	}
	fence, _, err := w.step(ctx, time.Now(), true)
	close(c.stop)
	c.wg.Wait()
	if err != nil || fence != 7 {
		t.Fatalf("third attempt: fence %d, err %v; want 7", fence, err)
	}
	if len(c.calls) != 3 || c.calls[0] == c.calls[1] || c.calls[1] == c.calls[2] {
		t.Fatalf("a failed attempt's Call was sent again: %p", c.calls)
	}
	if c.moved.Load() {
		t.Error("the client saw the arguments of a Call it still held change")
	}
	if got := c.calls[0].Args[3]; got != "new" {
		t.Errorf("first Call's ARGV[4] is %q after it failed, want %q (it was written while the client held it)", got, "new")
	}
	if got := c.calls[1].Args[3]; got != "" {
		t.Errorf("second Call's ARGV[4] is %q, want \"\" (a retry searches the queue)", got)
	}
	for i, call := range c.calls {
		if call.Args[0] != "owner-1" || call.Keys[0] != w.call.Keys[0] || len(call.Keys) != 4 {
			t.Errorf("call %d: keys %q, owner %q", i, call.Keys, call.Args[0])
		}
	}
}
