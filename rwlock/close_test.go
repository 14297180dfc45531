package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// slowRelease is a memory Backend whose ReleaseRW takes delay to reach
// the store, as over a slow link.
type slowRelease struct {
	*memory.Backend
	delay time.Duration
}

func (s slowRelease) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	time.Sleep(s.delay)
	return s.Backend.ReleaseRW(ctx, g, m)
}

// TestCloseRemovesWaitingIntent: Close ends a Lock waiting behind a
// reader, and that Lock removes the intent it registered before Close
// returns, so that the caller may then close the backend (as New's doc
// asks). Close returned before the removal, which then met a closed
// backend: the intent stayed, keeping new readers out of the name for
// up to Intent with no writer waiting.
func TestCloseRemovesWaitingIntent(t *testing.T) {
	st := memory.NewStore()
	ctx := context.Background()
	hold, err := rwlock.New(st.Backend(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	h, err := hold.RLock(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)

	b := slowRelease{Backend: st.Backend(), delay: 50 * time.Millisecond}
	w, err := rwlock.New(b, fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := w.Lock(ctx, "close"); done <- err }()
	for { // until the writer's intent is registered (bounded by the test's timeout)
		info, err := st.Backend().InspectRW(ctx, "close")
		if err != nil {
			t.Fatal(err)
		}
		if info.Intents > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close() // the caller closes the backend after the RWLock
	<-done
	info, err := st.Backend().InspectRW(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	if info.Intents != 0 {
		t.Fatalf("after Close and the backend's Close: %d intents left, want the closed writer's removed", info.Intents)
	}
}
