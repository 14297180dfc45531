package feed

import (
	"context"
	"testing"
	"time"
)

// TestStart: the events run sends arrive in order, stop ends run and
// returns only after it returned, the channel is then closed, and a
// second stop returns at once.
func TestStart(t *testing.T) {
	returned := make(chan struct{})
	events, stop := Start(context.Background(), func(ctx context.Context, out chan<- int) {
		defer close(returned)
		for i := 1; ; i++ {
			select {
			case out <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	for want := 1; want <= 3; want++ {
		if got := <-events; got != want {
			t.Fatalf("event %d = %d", want, got)
		}
	}
	stop()
	select {
	case <-returned:
	default:
		t.Fatal("stop returned before run did")
	}
	if _, ok := <-events; ok {
		t.Fatal("an event after stop returned, or the channel is not closed")
	}
	stop()
}

// TestStartParentContext: run's context ends with the parent's, and the
// channel is closed without stop.
func TestStartParentContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	events, stop := Start(ctx, func(ctx context.Context, _ chan<- struct{}) { <-ctx.Done() })
	defer stop()
	cancel()
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("an event from a run that sends none")
		}
	case <-time.After(time.Minute):
		t.Fatal("the channel was not closed within a minute of the parent context's end")
	}
}
