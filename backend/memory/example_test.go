package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/fencing"
)

// The memory backend runs the same Locker code as Redis or etcd, in the
// process: for examples, and for the unit tests of code that takes locks.
func Example() {
	ctx := context.Background()
	locker, err := fencedlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	err = locker.Do(ctx, "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		fmt.Println("holding", l.Key(), "with fence", l.Fence())
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// holding orders with fence 1
	// Do: <nil>
}

// In a unit test: two Lockers on one Store are two processes sharing a
// lock server. Store.Invalidate deletes a lock behind its holder's back
// (an operator, a failover); the holder is told at its next renewal, and
// its late write is rejected by the fence. In a test, t.Fatal where this
// example prints.
func Example_unitTest() {
	ctx := context.Background()
	store := memory.NewStore()
	a, _ := fencedlock.New(store.Backend(), fencedlock.Options{TTL: 200 * time.Millisecond})
	defer a.Close()
	b, _ := fencedlock.New(store.Backend(), fencedlock.Options{})
	defer b.Close()

	var guard fencing.Guard // the resource's fencing rule
	first, err := a.TryAcquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	_, err = b.TryAcquire(ctx, "orders")
	fmt.Println("B while A holds, not acquired:", errors.Is(err, fencedlock.ErrNotAcquired))

	store.Invalidate("orders") // behind A's back
	<-first.Done()             // A's next renewal finds it gone
	fmt.Println("A told:", errors.Is(first.Err(), fencedlock.ErrLeaseLost))

	second, err := b.TryAcquire(ctx, "orders")
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)
	fmt.Println("B writes:", guard.Do(second.Fence(), second.Holder(), func() error { return nil }))
	err = guard.Do(first.Fence(), first.Holder(), func() error { return nil })
	fmt.Println("A's late write rejected:", errors.Is(err, fencing.ErrStale))
	// Output:
	// B while A holds, not acquired: true
	// A told: true
	// B writes: <nil>
	// A's late write rejected: true
}
