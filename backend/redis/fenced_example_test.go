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
	rec, err := b.FencedGet(ctx, "orders-state")
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Value, "with fence", rec.Fence)
	// Output:
	// rejected: fence 1, accepted 2
	// written by B with fence 2
}

// A user's own atomic write behind the guard: the body keeps the order in a
// plain string (readable with GET) and appends to a list, in one script
// with the fence check on the hash "{order:42}:fence". On Redis Cluster the
// keys share the hash tag {order:42}. The example runs on an in-process
// miniredis.
func ExampleBackend_NewFencedScript() {
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
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	// The body sees only its own keys and arguments: KEYS[1], KEYS[2] and
	// ARGV[1] here are the keys and args given to Exec, after the guard's.
	save := b.NewFencedScript(`
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('RPUSH', KEYS[2], ARGV[1])`)
	guard, keys := "{order:42}:fence", []string{"{order:42}", "{order:42}:history"}

	a, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	n, err := save.Exec(ctx, guard, a.Fence(), a.Holder(), keys, []string{"paid"})
	if err != nil {
		panic(err)
	}
	fmt.Println(n.AsInt64())
	a.Release(ctx) // or: A pauses and its lease expires

	next, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	defer next.Release(ctx)
	if _, err := save.Exec(ctx, guard, next.Fence(), next.Holder(), keys, []string{"shipped"}); err != nil {
		panic(err)
	}

	// A comes back with its old fence: nothing runs.
	_, err = save.Exec(ctx, guard, a.Fence(), a.Holder(), keys, []string{"refunded"})
	fmt.Println(errors.Is(err, fencing.ErrStale))
	state, _ := client.Do(ctx, client.B().Get().Key("{order:42}").Build()).ToString()
	fmt.Println(state)
	// Output:
	// 1 <nil>
	// true
	// shipped
}
