package multilock_test

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/multilock"
)

// Two accounts locked at once for a transfer: all or nothing, one lease,
// each account's resource guarded with its own fence.
func Example() {
	store := memory.NewStore()
	m, err := multilock.New(store.Backend(), fencedlock.Options{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	ctx := context.Background()

	ls, err := m.Acquire(ctx, []string{"account:7", "account:3"})
	if err != nil {
		panic(err)
	}
	for i, k := range ls.Keys() {
		fmt.Printf("%s fence %d\n", k, ls.Fences()[i])
	}

	// Another caller wanting account:3 and account:9 takes neither.
	_, err = m.TryAcquire(ctx, []string{"account:9", "account:3"})
	fmt.Println("overlapping set:", err != nil)
	if err := ls.Release(ctx); err != nil {
		panic(err)
	}
	ls, err = m.TryAcquire(ctx, []string{"account:9", "account:3"})
	if err != nil {
		panic(err)
	}
	f3, _ := ls.Fence("account:3")
	f9, _ := ls.Fence("account:9")
	fmt.Println("account:3 fence", f3, "account:9 fence", f9)
	_ = ls.Release(ctx)
	// Output:
	// account:3 fence 1
	// account:7 fence 1
	// overlapping set: true
	// account:3 fence 2 account:9 fence 1
}
