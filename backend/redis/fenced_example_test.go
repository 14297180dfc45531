package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/redis/rueidis"
)

// A holder that comes back late with an old fence cannot overwrite what a
// newer holder wrote. The example runs on an in-process miniredis.
func ExampleBackend_FencedSet() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	b, err := redis.New(client, redis.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Close() // after locker.Close: a Locker does not close its backend
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	a, err := locker.Acquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	if err := b.FencedSet(ctx, "orders-state", "written by A", a.Fence(), a.Holder()); err != nil {
		panic(err)
	}
	a.Release(ctx) // or: A pauses and its lease expires

	next, err := locker.Acquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	defer next.Release(ctx)
	if err := b.FencedSet(ctx, "orders-state", "written by B", next.Fence(), next.Holder()); err != nil {
		panic(err)
	}

	// A comes back with its old fence.
	err = b.FencedSet(ctx, "orders-state", "late write by A", a.Fence(), a.Holder())
	var stale *fencing.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("rejected: fence %d, accepted %d\n", stale.Token, stale.Accepted)
	}
	value, _, fence, _, err := b.FencedGet(ctx, "orders-state")
	if err != nil {
		panic(err)
	}
	fmt.Println(value, "with fence", fence)
	// Output:
	// rejected: fence 1, accepted 2
	// written by B with fence 2
}
