package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/fencing"
)

// The code using the lock is the same as on any other backend: only the
// constructor differs. It needs a running etcd, so it has no Output.
func Example() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	b, err := etcd.New(client, etcd.Options{KeyPrefix: "myapp/locks/"})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // whoever creates the backend closes it: Locker.Close does not
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	store := etcd.NewFencedStore(b) // a fencing.Store, as on every backend
	ctx := context.Background()
	err = locker.Do(ctx, "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		// ctx ends if the lease is lost. The write is fenced: a holder
		// paused past its lease cannot overwrite a later holder's write.
		return store.Set(ctx, "myapp/orders/state", "paid", l.Fence(), l.Holder())
	})
	switch {
	case errors.Is(err, fencing.ErrStale):
		fmt.Println("a later holder already wrote")
	case errors.Is(err, fencedlock.ErrLeaseLost):
		fmt.Println("lease lost while working")
	case err != nil:
		log.Fatal(err)
	}
}
