package rwlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TryLockLeavesNoIntent: a TryLock refused by a reader gives up at once
// and registers no intent: another RWLock's reader is granted right after
// it, and a backend that is a driver.RWInspector counts no intent.
func TryLockLeavesNoIntent(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, b, c := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})
	n := name("trylock")
	r := lock(t, ctx, a, n, rwlock.Read)
	defer r.Release(ctx)
	for i := range 3 {
		w, err := b.TryLock(ctx, n)
		wantRefused(t, w, err, "TryLock while a reader holds")
		r2, err := c.TryRLock(ctx, n)
		if err != nil {
			t.Fatalf("TryRLock right after a refused TryLock (round %d): %v, want no intent left", i, err)
		}
		r2.Release(ctx)
	}
	if in, ok := s.Backend(t).(driver.RWInspector); ok {
		info, err := in.InspectRW(ctx, n)
		if err != nil || info.Intents != 0 {
			t.Fatalf("after refused TryLocks: %+v, %v; want no intent", info, err)
		}
	}
}

// PausedReaderLost: a reader paused past its TTL (it never renews) loses
// the name: a waiting writer is granted once the server expired it, not
// before, and the reader's Context has ended by then (its local deadline
// comes before the server's expiry). The reader's Err reports the loss; its late Renew and Release
// fail with ErrNotHeld and change nothing: the writer still holds alone
// (no reader, no other writer gets in, its renewal succeeds), with a fence
// above the reader's.
func PausedReaderLost(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paused := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true})
	other, probe := s.New(t, retrying), s.New(t, fencedlock.Options{})
	n := name("pausedreader")
	start := time.Now()
	r := lock(t, ctx, paused, n, rwlock.Read)
	w := lock(t, ctx, other, n, rwlock.Write) // waits until r expired on the server
	learnedFirst(t, r, "paused reader", "a writer")
	defer w.Release(ctx)
	if waited := time.Since(start); waited < s.TTL {
		t.Fatalf("a writer came in %v after the reader, within its TTL of %v", waited, s.TTL)
	}
	if !errors.Is(r.Err(), fencedlock.ErrLeaseLost) {
		t.Fatalf("paused reader's Err = %v, want ErrLeaseLost", r.Err())
	}
	if err := r.Renew(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("paused reader's late Renew = %v, want ErrNotHeld", err)
	}
	if err := r.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("paused reader's late Release = %v, want ErrNotHeld", err)
	}
	if w.Fence() <= r.Fence() {
		t.Fatalf("writer's fence %v not above the lost reader's %v", w.Fence(), r.Fence())
	}
	pr, err := probe.TryRLock(ctx, n)
	wantRefused(t, pr, err, "TryRLock while the writer holds, after the lost reader's Renew and Release")
	pw, err := probe.TryLock(ctx, n)
	wantRefused(t, pw, err, "TryLock while the writer holds, after the lost reader's Renew and Release")
	if err := w.Renew(ctx); err != nil || w.Err() != nil {
		t.Fatalf("the writer's renewal after the lost reader's Renew and Release: %v (Err %v)", err, w.Err())
	}
}

// CloseReleasesLeases: Close releases every lease the RWLock holds, read
// and write, on several names: each closed lease reports ErrReleased, and
// another RWLock takes each name in the other mode at once after.
func CloseReleasesLeases(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	closing, other := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})
	rn, wn := name("closeread"), name("closewrite")
	held := []*rwlock.Lease{lock(t, ctx, closing, rn, rwlock.Read), lock(t, ctx, closing, rn, rwlock.Read), lock(t, ctx, closing, wn, rwlock.Write)}
	if err := closing.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, l := range held {
		if !errors.Is(l.Err(), fencedlock.ErrReleased) {
			t.Fatalf("%v lease of %q after Close: Err %v, want ErrReleased", l.Mode(), l.Key(), l.Err())
		}
	}
	w, err := other.TryLock(ctx, rn)
	if err != nil {
		t.Fatalf("TryLock of %q after the readers' RWLock closed: %v", rn, err)
	}
	w.Release(ctx)
	r, err := other.TryRLock(ctx, wn)
	if err != nil {
		t.Fatalf("TryRLock of %q after the writer's RWLock closed: %v", wn, err)
	}
	r.Release(ctx)
	if _, err := closing.TryRLock(ctx, rn); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("TryRLock on the closed RWLock: %v, want ErrClosed", err)
	}
	if _, err := closing.Lock(ctx, wn); !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("Lock on the closed RWLock: %v, want ErrClosed", err)
	}
}

// ReservedNames: names with the characters backends escape or give a
// meaning to (hash tags, path separators, percent signs, glob characters,
// invalid UTF-8), names that are prefixes of each other, and a name of
// the greatest length RWLock accepts (driver.MaxKeyLen - 21 bytes) each
// name a lock of their own: a writer of one keeps no reader of another
// out, and its own readers out.
func ReservedNames(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Leases of a minute: the scenario is about names, not renewals, and
	// its twelve writers hold throughout (on etcd with the setup's 2s TTL,
	// at load average 15, a writer's lease was lost before its release).
	long := fencedlock.Options{TTL: time.Minute}
	a, b := s.New(t, long), s.New(t, long)
	base := name("reserved")
	longest := base + strings.Repeat("{/%}", (driver.MaxKeyLen-21-len(base))/4)
	longest += strings.Repeat("x", driver.MaxKeyLen-21-len(longest))
	names := []string{base, base + "/", base + "/r", base + "/w/", base + "}", "{" + base + "}", base + "%2F",
		base + ":rw:writer", base + "*?[", base + "\xff\xfe", base + " ", longest}
	writers := make([]*rwlock.Lease, len(names))
	for i, n := range names {
		writers[i] = lock(t, ctx, a, n, rwlock.Write)
	}
	for i, n := range names {
		r, err := b.TryRLock(ctx, n)
		wantRefused(t, r, err, fmt.Sprintf("TryRLock of %q while its writer holds", n))
		if err := writers[i].Release(ctx); err != nil {
			t.Fatalf("writer of %q: %v", n, err)
		}
		if i+1 < len(names) { // the writers of the other names still hold
			r = lock(t, ctx, b, n, rwlock.Read)
			r.Release(ctx)
		}
	}
	if len(longest) != driver.MaxKeyLen-21 {
		t.Fatalf("long name of %d bytes", len(longest))
	}
}

// CloseUnderLoad: Close while goroutines sharing the RWLock hold, wait
// for and try read and write leases of two names: every call returns
// (ErrClosed once it is closed), Close reports no error, and nothing is
// left on the backend: another RWLock takes both names for writing at
// once, and a backend that is a driver.RWInspector shows no lease and no
// intent.
func CloseUnderLoad(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r := s.New(t, retrying)
	names := []string{name("closea"), name("closeb")}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := 0; j < 1000 && ctx.Err() == nil; j++ { // until closed (bounded)
				l, err := anyLease(ctx, r, names[(i+j)%2], (i+j)%4)
				if errors.Is(err, fencedlock.ErrClosed) {
					return
				}
				if err == nil {
					time.Sleep(time.Millisecond)
					l.Release(ctx)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatalf("Close under load: %v", err)
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the RWLock's callers ran until the scenario's timeout: %v", ctx.Err())
	}
	other := s.New(t, fencedlock.Options{})
	in, _ := s.Backend(t).(driver.RWInspector)
	for _, n := range names {
		if in != nil {
			if info, err := in.InspectRW(ctx, n); err != nil || info.Held() || info.Intents != 0 {
				t.Fatalf("%q after Close: %+v, %v; want nothing held, no intent", n, info, err)
			}
		}
		w, err := other.TryLock(ctx, n)
		if err != nil {
			t.Fatalf("TryLock of %q after Close: %v", n, err)
		}
		w.Release(ctx)
	}
}

// anyLease takes a lease of n with r: Lock, RLock, TryLock or TryRLock
// for how 0 to 3.
func anyLease(ctx context.Context, r *rwlock.RWLock, n string, how int) (*rwlock.Lease, error) {
	switch how {
	case 0:
		return r.Lock(ctx, n)
	case 1:
		return r.RLock(ctx, n)
	case 2:
		return r.TryLock(ctx, n)
	}
	return r.TryRLock(ctx, n)
}
