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
	_, b, _, done := exampleSetup()
	defer done()
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

// A holder that comes back late with an old fence cannot overwrite what a
// newer holder wrote. The example runs on an in-process miniredis.
func ExampleBackend_FencedSet() {
	_, b, locker, done := exampleSetup()
	defer done()
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
	client, b, locker, done := exampleSetup()
	defer done()
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

// exampleSetup is the setup Example shows step by step, for the examples
// whose point lies elsewhere: an in-process miniredis, a rueidis client of
// it, a Backend on the client and a Locker (TTL 10s) on the Backend; done
// closes them in reverse order (a Locker does not close its backend, nor
// a backend its client).
func exampleSetup() (client rueidis.Client, b *redis.Backend, locker *fencedlock.Locker, done func()) {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	if b, err = redis.New(client, redis.Options{}); err != nil {
		panic(err)
	}
	if locker, err = fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second}); err != nil {
		panic(err)
	}
	return client, b, locker, func() { locker.Close(); b.Close(); client.Close(); srv.Close() }
}
