package semaphore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/semaphore"
)

// At most two workers hold a permit of "render" at once. Each writes its
// slot's partition of the resource under the permit's fence: once a
// permit of slot 0 was released and taken again, the old holder's late
// write to slot 0 is refused.
func Example() {
	ctx := context.Background()
	store, data := memory.NewStore(), memory.NewFencedStore()
	b := store.Backend()
	defer b.Close()
	sem, err := semaphore.New(b, fencedlock.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sem.Close()

	p1, _ := sem.Acquire(ctx, "render", 2)
	p2, _ := sem.Acquire(ctx, "render", 2)
	_, err = sem.TryAcquire(ctx, "render", 2)
	fmt.Println("third permit refused:", errors.Is(err, fencedlock.ErrNotAcquired))

	old := p1
	if p2.Slot() == 0 {
		old = p2
	}
	partition := fmt.Sprintf("render/out/%d", old.Slot())
	fmt.Println("old holder writes:", data.Set(ctx, partition, "frame 1", old.Fence(), old.Holder()) == nil)
	_ = old.Release(ctx)

	next, _ := sem.Acquire(ctx, "render", 2) // the only free slot: the old one's
	defer next.Release(ctx)
	fmt.Println("same slot, greater fence:", next.Slot() == old.Slot() && next.Fence() > old.Fence())
	fmt.Println("next holder writes:", data.Set(ctx, partition, "frame 2", next.Fence(), next.Holder()) == nil)
	err = data.Set(ctx, partition, "late frame", old.Fence(), old.Holder())
	fmt.Println("old holder's late write refused:", err != nil)
	// Output:
	// third permit refused: true
	// old holder writes: true
	// same slot, greater fence: true
	// next holder writes: true
	// old holder's late write refused: true
}
