package goredis_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
)

// A service that already has a go-redis client (plain, Sentinel or
// Cluster: any redis.UniversalClient) builds the backend on it; the code
// using the lock is the same as on any other backend. It needs a running
// Redis, so it has no Output.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // or NewFailoverClient, NewClusterClient
	defer client.Close()
	b, err := goredis.New(client, goredis.Options{})
	if err != nil {
		log.Fatal(err) // for example a maxmemory-policy that may evict locks
	}
	defer b.Close() // the creator closes the backend; Locker.Close does not
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(ctx, "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		// ctx ends if the lease is lost; the guarded write checks the fence.
		return b.FencedSet(ctx, "orders:state", "shipped", l.Fence(), l.Holder())
	})
	if errors.Is(err, fencedlock.ErrLeaseLost) {
		log.Print("lost the lock while working: a late write is rejected by the guard")
	} else if err != nil {
		log.Fatal(err)
	}
}

// Blocking acquires wait in a queue on the server and are granted in
// arrival order: a release hands the lock to the first waiter instead of
// letting every waiter race for it. It needs a running Redis, so it has
// no Output.
func ExampleNew_queue() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	b, err := goredis.New(client, goredis.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err == nil {
		defer locker.Close()
		// Queues behind the holder, if any, until its release hands over.
		err = locker.Do(context.Background(), "orders", func(ctx context.Context, l *fencedlock.Lease) error { return nil })
	}
	if err != nil {
		log.Print(err)
	}
}
