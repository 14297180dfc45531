package election_test

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/election"
)

// A leader writes under its term's fence; once it resigned and another
// leads, its late write is refused by the guard.
func Example() {
	ctx := context.Background()
	store, config := memory.NewStore(), memory.NewFencedStore()
	ba, bb := store.Backend(), store.Backend() // two processes
	defer ba.Close()
	defer bb.Close()
	ea, _ := election.New(ba, fencedlock.Options{})
	defer ea.Close()
	eb, _ := election.New(bb, fencedlock.Options{})
	defer eb.Close()

	a, err := ea.Campaign(ctx, "scheduler", []byte("10.0.0.1:8080"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a leads:", config.Set(ctx, "plan", "a's plan", a.Fence(), a.Holder()) == nil)
	_ = a.Resign(ctx)

	b, err := eb.Campaign(ctx, "scheduler", []byte("10.0.0.2:8080"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Resign(ctx)
	leader, _ := ea.Leader(ctx, "scheduler")
	fmt.Printf("leader: %s, fence above a's: %v\n", leader.Value, leader.Fence > a.Fence())
	fmt.Println("b writes:", config.Set(ctx, "plan", "b's plan", b.Fence(), b.Holder()) == nil)
	err = config.Set(ctx, "plan", "a's late plan", a.Fence(), a.Holder())
	fmt.Println("a's late write refused:", err != nil)
	// Output:
	// a leads: true
	// leader: 10.0.0.2:8080, fence above a's: true
	// b writes: true
	// a's late write refused: true
}
