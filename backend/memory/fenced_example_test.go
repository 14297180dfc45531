package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/fencing"
)

// Orders is a user's service: it marks an order paid under the order's
// lock, writing through whatever fencing.Store it is given (Redis or etcd in
// production).
type Orders struct {
	locker *fencedlock.Locker
	store  fencing.Store
}

var errAlreadyPaid = errors.New("orders: already paid")

// Pay sets the order's state to "paid" under the lease's fence.
func (o *Orders) Pay(ctx context.Context, id string) error {
	return o.locker.Do(ctx, "order:"+id, func(ctx context.Context, l *fencedlock.Lease) error {
		return o.store.Update(ctx, "orders/"+id, l.Fence(), l.Holder(), func(cur fencing.Record) (string, error) {
			if cur.Value == "paid" {
				return "", errAlreadyPaid
			}
			return "paid", nil
		})
	})
}

// A unit test of a service that writes under a fence needs no server and no
// fake of its own: a memory Backend for the locks, a FencedStore for the
// data. The store applies the fencing rule like the real ones, so the test
// can also show a paused former holder's late write rejected.
func ExampleFencedStore() {
	store := memory.NewFencedStore()
	locker, err := fencedlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	svc := &Orders{locker: locker, store: store}
	ctx := context.Background()

	// A holder that will be paused past its lease: it loses the lock
	// before writing (Release stands in for the expiry).
	old, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	old.Release(ctx)

	fmt.Println("first Pay:", svc.Pay(ctx, "42"))
	fmt.Println("second Pay:", svc.Pay(ctx, "42"))
	rec, _ := store.Get(ctx, "orders/42")
	fmt.Println("stored:", rec.Value, "fence", rec.Fence)

	// The paused holder wakes up and writes late, under its old fence.
	err = store.Set(ctx, "orders/42", "refunded", old.Fence(), old.Holder())
	fmt.Println("late write stale:", errors.Is(err, fencing.ErrStale))
	// Output:
	// first Pay: <nil>
	// second Pay: orders: already paid
	// stored: paid fence 2
	// late write stale: true
}
