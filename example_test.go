package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/fencing"
)

func ExampleLocker_Do() {
	b := memory.New()
	defer b.Close() // the creator of a backend closes it, after its Lockers
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err) // an option out of range wraps fencedlock.ErrInvalid
	}
	defer locker.Close()

	var orders fencing.Guard // the guarded resource, checking fences
	err = locker.Do(context.Background(), "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		// ctx ends if the lease is lost; the guard rejects stale fences.
		return orders.Do(l.Fence(), l.Holder(), func() error {
			fmt.Println("writing with fence", l.Fence())
			return nil
		})
	})
	fmt.Println("err:", err)
	// Output:
	// writing with fence 1
	// err: <nil>
}

func ExampleLocker_TryAcquire() {
	store := memory.NewStore() // two processes sharing one lock server
	// The default options are valid: New cannot fail here.
	a, _ := fencedlock.New(store.Backend(), fencedlock.Options{})
	b, _ := fencedlock.New(store.Backend(), fencedlock.Options{})
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	lease, _ := a.TryAcquire(ctx, "orders")
	_, err := b.TryAcquire(ctx, "orders")
	fmt.Println(errors.Is(err, fencedlock.ErrNotAcquired))

	_ = lease.Release(ctx)
	lease2, _ := b.TryAcquire(ctx, "orders")
	fmt.Println(lease.Fence(), "<", lease2.Fence())
	// Output:
	// true
	// 1 < 2
}

func ExampleLocker_Acquire() {
	locker, err := fencedlock.New(memory.New(), fencedlock.Options{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	// The context bounds only the wait; the lease lives until released.
	wait, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	lease, err := locker.Acquire(wait, "reports")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Release(context.Background())
	fmt.Println(lease.Key(), lease.Fence(), lease.Err())
	// Output: reports 1 <nil>
}

func ExampleLease_Context() {
	store := memory.NewStore()
	locker, err := fencedlock.New(store.Backend(), fencedlock.Options{TTL: time.Second})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	lease, _ := locker.TryAcquire(context.Background(), "jobs")

	store.Invalidate("jobs") // an operator deletes the key behind our back

	<-lease.Done() // the watchdog notices at its next renewal
	fmt.Println(errors.Is(context.Cause(lease.Context()), fencedlock.ErrLeaseLost))
	fmt.Println(errors.Is(lease.Release(context.Background()), fencedlock.ErrNotHeld))
	// Output:
	// true
	// true
}
