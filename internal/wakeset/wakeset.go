// Package wakeset watches several keys of a [driver.Notifier] as one: the
// waiters of a semaphore (its slots) and of a set of keys (package
// multilock) are woken by the release of any key they wait for.
package wakeset

import (
	"context"
	"sync"

	"github.com/fencedlock/fencedlock/driver"
)

// Watch starts a watch of each key of keys on n and returns one channel
// that receives a value (sent without blocking; its buffer of one holds a
// pending wake-up) each time any of them may have become free, and a stop
// function that ends every watch and must be called exactly once. Each
// watch is in effect when Watch returns, as [driver.Notifier] requires. A
// key whose watch fails is left out (the caller's timed retry covers it);
// if no key could be watched, Watch returns the first error and nothing
// to stop.
func Watch(ctx context.Context, n driver.Notifier, keys []string) (<-chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		stops []func()
		first error
	)
	for _, k := range keys {
		ch, stop, err := n.Watch(wctx, k)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		stops = append(stops, stop)
		wg.Go(func() { forward(wctx, ch, wake) })
	}
	if len(stops) == 0 {
		cancel()
		return nil, nil, first
	}
	return wake, func() {
		cancel()
		wg.Wait()
		for _, stop := range stops {
			stop()
		}
	}, nil
}

// forward passes the wake-ups of one key's watch on to wake until ctx
// ends or the watch's channel is closed.
func forward(ctx context.Context, ch <-chan struct{}, wake chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}
