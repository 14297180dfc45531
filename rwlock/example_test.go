package rwlock_test

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/rwlock"
)

// Two readers share a name; a writer waits for them, and its fence is
// above both readers', so a guard that saw the writer refuses a write
// made with an earlier lease.
func Example() {
	ctx := context.Background()
	store, config := memory.NewStore(), memory.NewFencedStore()
	b := store.Backend()
	defer b.Close()
	rw, err := rwlock.New(b, fencedlock.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rw.Close()

	r1, _ := rw.RLock(ctx, "config")
	r2, _ := rw.RLock(ctx, "config")
	_, err = rw.TryLock(ctx, "config")
	fmt.Println("writer while two readers hold:", err != nil)
	r1.Release(ctx)
	r2.Release(ctx)

	w, err := rw.Lock(ctx, "config")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Release(ctx)
	fmt.Println("writer's fence above the readers':", w.Fence() > r1.Fence() && w.Fence() > r2.Fence())
	fmt.Println("write:", config.Set(ctx, "config", "v2", w.Fence(), w.Holder()) == nil)
	fmt.Println("late write with a reader's fence refused:", config.Set(ctx, "config", "v1", r2.Fence(), r2.Holder()) != nil)
	// Output:
	// writer while two readers hold: true
	// writer's fence above the readers': true
	// write: true
	// late write with a reader's fence refused: true
}
