// Package feed runs the goroutine behind a watch that delivers events on
// a channel (the backends' WatchLeader): the channel is closed when the
// goroutine returns, and stop ends it and waits for it. Written once for
// the backends that need it.
package feed

import (
	"context"
	"sync"
)

// Start runs run in a goroutine of its own with a context derived from
// ctx, and returns the channel run sends on, closed once run returned, and
// stop, which cancels run's context and returns once run returned. stop
// may be called more than once. run must return when its context ends.
func Start[E any](ctx context.Context, run func(ctx context.Context, out chan<- E)) (<-chan E, func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan E)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		run(ctx, out)
	}()
	var once sync.Once
	return out, func() { once.Do(func() { cancel(); <-done }) }
}
