package rwlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/rwlock"
)

// breaking is a memory backend whose write acquires fail with a permanent
// error once broken is set (as a script refused by an ACL, or a key of the
// wrong type).
type breaking struct {
	*memory.Backend
	broken atomic.Bool
}

func (b *breaking) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	if req.Mode == driver.Write && b.broken.Load() {
		return driver.Grant{}, fmt.Errorf("breaking: NOPERM: %w", driver.ErrPermanent)
	}
	return b.Backend.AcquireRW(ctx, req)
}

// TestWriterGivingUpOnErrorLeavesNoIntent: a Lock that gives up because an
// attempt failed with an error no retry can fix (not because its context
// ended) returns that error and removes the intent its earlier attempts
// registered: a reader gets in at once.
func TestWriterGivingUpOnErrorLeavesNoIntent(t *testing.T) {
	st := memory.NewStore()
	b := &breaking{Backend: st.Backend()}
	w := locktest.Open(t, b, fencedlock.Options{MinRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}, rwlock.New)
	rl := locktest.Open(t, st.Backend(), fencedlock.Options{}, rwlock.New)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h := lease(t, rl, rwlock.Read, "giveup")
	done := make(chan error, 1)
	go func() { _, err := w.Lock(ctx, "giveup"); done <- err }()
	for { // until the writer's intent is registered (bounded by ctx)
		info, err := st.Backend().InspectRW(ctx, "giveup")
		if err != nil {
			t.Fatal(err)
		}
		if info.Intents > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.broken.Store(true)
	if err := <-done; !errors.Is(err, fencedlock.ErrPermanent) {
		t.Fatalf("Lock whose attempt failed for good: %v, want ErrPermanent", err)
	}
	r, err := rl.TryRLock(ctx, "giveup")
	if err != nil {
		t.Fatalf("TryRLock after the writer gave up on an error: %v, want its intent removed", err)
	}
	_ = r.Release(ctx)
	_ = h.Release(ctx)
}
