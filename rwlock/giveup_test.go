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

// unreachable is a memory backend whose releases fail (the server
// unreachable) while down is set.
type unreachable struct {
	*memory.Backend
	down atomic.Bool
}

func (u *unreachable) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	if u.down.Load() {
		return errors.New("unreachable: connection refused")
	}
	return u.Backend.ReleaseRW(ctx, g, m)
}

// TestFailedRemovalIntentLastsIntent: a Lock that gave up but could not
// remove its intent (the server unreachable) keeps new readers out for
// RWLock.Intent after its last attempt and no longer: the intent its view
// registers is the one Intent reports.
func TestFailedRemovalIntentLastsIntent(t *testing.T) {
	st := memory.NewStore()
	u := &unreachable{Backend: st.Backend()}
	opts := fencedlock.Options{MinRetryDelay: 50 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond, ReleaseTimeout: 100 * time.Millisecond}
	w := locktest.Open(t, u, opts, rwlock.New)
	rl := locktest.Open(t, st.Backend(), fencedlock.Options{}, rwlock.New)
	intent := w.Intent() // 350ms
	h := lease(t, rl, rwlock.Read, "unreachable")
	u.down.Store(true)
	wctx, cancel := context.WithTimeout(t.Context(), 120*time.Millisecond)
	_, err := w.Lock(wctx, "unreachable")
	cancel()
	gaveUp := time.Now() // after the last attempt, whose intent lasts until before gaveUp+intent
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock behind a reader: %v, want the context's error", err)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := rl.TryRLock(t.Context(), "unreachable")
	if time.Since(gaveUp) < intent/2 {
		wantNotAcquired(t, r, err, "TryRLock right after the writer gave up with its intent left")
	} else if err == nil {
		_ = r.Release(t.Context()) // a loaded machine: too late to tell
	}
	for {
		r, err = rl.TryRLock(t.Context(), "unreachable")
		if err == nil {
			break
		}
		if time.Since(gaveUp) > intent+200*time.Millisecond {
			t.Fatalf("readers still refused %v after the writer gave up (Intent %v): %v", time.Since(gaveUp), intent, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = r.Release(t.Context())
	t.Logf("a reader got in %v after the writer gave up (Intent %v)", time.Since(gaveUp).Round(time.Millisecond), intent)
}

func wantNotAcquired(t *testing.T, l *rwlock.Lease, err error, why string) {
	t.Helper()
	if err == nil {
		_ = l.Release(t.Context())
		t.Fatalf("%s: granted", why)
	}
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", why, err)
	}
}
