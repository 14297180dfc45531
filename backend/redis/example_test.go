package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/redis/rueidis"
)

// The Redis backend under a Locker. The example runs on an in-process
// miniredis; with a real server, only InitAddress changes.
func Example() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the backend never closes the caller's client

	b, err := redis.New(client, redis.Options{KeyPrefix: "app:locks:"})
	if err != nil {
		panic(err)
	}
	defer b.Close() // whoever creates the backend closes it: Locker.Close does not
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	var store fencing.Guard // the guarded resource
	ctx := context.Background()
	err = locker.Do(ctx, "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		fmt.Println("holding", l.Key(), "with fence", l.Fence())
		return store.Do(l.Fence(), l.Holder(), func() error { return nil })
	})
	fmt.Println("done:", err)

	// Another owner (here a second Locker: one Locker is not reentrant, see
	// fencedlock.ErrHeldByLocker) sees a held key as ErrNotAcquired, with
	// the remaining TTL.
	other, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer other.Close()
	first, _ := locker.TryAcquire(ctx, "orders")
	_, err = other.TryAcquire(ctx, "orders")
	var held *driver.HeldError
	fmt.Println("second owner refused:", errors.Is(err, driver.ErrNotAcquired), errors.As(err, &held) && held.RetryAfter > 0)
	fmt.Println("next fence:", first.Fence())
	_ = first.Release(ctx)

	// Output:
	// holding orders with fence 1
	// done: <nil>
	// second owner refused: true true
	// next fence: 2
}

// The Redis keys of a lock name, e.g. to release a lock by hand with
// redis-cli --eval internal/redisscript/release.lua LOCKKEY , TOKEN.
func ExampleBackend_LockKey() {
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
	defer b.Close()
	fmt.Println(b.LockKey("orders"))
	fmt.Println(b.FenceKey("orders"))
	fmt.Println(b.Channel("orders"))
	fmt.Println(b.LockKey("}odd{key%"))
	// Output:
	// fencedlock:{orders}
	// fencedlock:{orders}:fence
	// fencedlock:{orders}:released
	// fencedlock:{%7Dodd%7Bkey%25}
}
