package rwlocktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/rwlock"
)

// manyReaders is how many readers ManyReadersThenWriter holds at once.
const manyReaders = 200

// ManyReadersThenWriter: manyReaders readers of one name, from two
// RWLocks, then a writer: it waits for every one of them (it is granted
// only after the last reader released) with a fence above each reader's,
// and while it waits no new reader is granted (its intent). A reader
// released twice reports ErrNotHeld and ErrReleased the second time and
// lets nobody in early.
func ManyReadersThenWriter(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	a, b := s.New(t, fencedlock.Options{TTL: 30 * time.Second}), s.New(t, fencedlock.Options{TTL: 30 * time.Second})
	wr, probe := s.New(t, retrying), s.New(t, fencedlock.Options{})
	n := name("many")
	readers := make([]*rwlock.Lease, manyReaders)
	var wg sync.WaitGroup
	errs := make(chan error, manyReaders)
	for i := range readers {
		wg.Go(func() {
			r, err := []*rwlock.RWLock{a, b}[i%2].RLock(ctx, n)
			readers[i] = r
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("one of %d readers: %v", manyReaders, err)
	}
	var maxFence fencing.Token
	seen := make(map[fencing.Token]bool, manyReaders)
	for _, r := range readers {
		if seen[r.Fence()] {
			t.Fatalf("two of %d readers share fence %v", manyReaders, r.Fence())
		}
		seen[r.Fence()] = true
		maxFence = max(maxFence, r.Fence())
	}
	var held atomic.Int64 // readers not yet released
	held.Store(manyReaders)
	type result struct {
		w       *rwlock.Lease
		err     error
		readers int64
	}
	got := make(chan result, 1)
	go func() {
		w, err := wr.Lock(ctx, n)
		got <- result{w, err, held.Load()}
	}()
	// The writer's intent keeps new readers out.
	waitIntent(t, ctx, probe, n)
	for i, r := range readers {
		if i == manyReaders/2 {
			if err := r.Release(ctx); err != nil {
				t.Fatalf("reader release: %v", err)
			}
			if err := r.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) || !errors.Is(err, fencedlock.ErrReleased) {
				t.Fatalf("a reader's second Release: %v, want ErrNotHeld and ErrReleased", err)
			}
			held.Add(-1)
			continue
		}
		held.Add(-1)
		if err := r.Release(ctx); err != nil {
			t.Fatalf("reader release: %v", err)
		}
	}
	res := <-got
	if res.err != nil {
		t.Fatalf("writer after %d readers: %v", manyReaders, res.err)
	}
	defer res.w.Release(ctx)
	if res.readers != 0 {
		t.Fatalf("the writer was granted while %d of %d readers had not released", res.readers, manyReaders)
	}
	if res.w.Fence() <= maxFence {
		t.Fatalf("writer's fence %v not above the greatest of %d readers' %v", res.w.Fence(), manyReaders, maxFence)
	}
}

// waitIntent waits until a TryRLock of n is refused (a writer's intent
// keeps readers out although readers hold), and checks it stays refused.
func waitIntent(t *testing.T, ctx context.Context, probe *rwlock.RWLock, n string) {
	t.Helper()
	for {
		r, err := probe.TryRLock(ctx, n)
		if err != nil {
			wantRefused(t, r, err, "TryRLock while a writer waits")
			return
		}
		r.Release(ctx)
		select {
		case <-ctx.Done():
			t.Fatalf("no writer's intent refused a reader of %q: %v", n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// learnedFirst checks, right after other's lease was granted, that the
// paused holder's lease l already ended: the holder learns it lost the
// name before anybody else holds it.
func learnedFirst(t *testing.T, l *rwlock.Lease, holder, other string) {
	t.Helper()
	if l.Context().Err() == nil {
		t.Fatalf("%s was granted while the %s's Context was live (Err %v)", other, holder, l.Err())
	}
}
