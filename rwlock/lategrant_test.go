package rwlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/rwlock"
)

// slowGrant is a memory backend whose next late AcquireRW calls are
// applied at once and answered delay later, as over a link that stalls.
type slowGrant struct {
	*memory.Backend
	late  atomic.Int32
	delay time.Duration
}

func (s *slowGrant) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	g, err := s.Backend.AcquireRW(ctx, req)
	if s.late.Add(-1) >= 0 {
		time.Sleep(s.delay)
	}
	return g, err
}

// TestLateGrantRefused: a read or write grant that came back with less
// than its safety margin left is refused and released (the lease is a
// fencedlock.Lease, whose late grants are): TryRLock and TryLock fail
// with ErrLateGrant naming the name, and another RWLock takes the name in
// the other mode at once; a waiting Lock or RLock whose grant came back
// late goes on waiting and takes the name with its next attempt.
func TestLateGrantRefused(t *testing.T) {
	st := memory.NewStore()
	const ttl = 200 * time.Millisecond
	slow := &slowGrant{Backend: st.Backend(), delay: ttl}
	r := locktest.Open(t, slow, fencedlock.Options{TTL: ttl}, rwlock.New)
	other := locktest.Open(t, st.Backend(), fencedlock.Options{}, rwlock.New)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, m := range []rwlock.Mode{rwlock.Read, rwlock.Write} {
		slow.late.Store(1)
		var err error
		if m == rwlock.Read {
			_, err = r.TryRLock(ctx, "late")
		} else {
			_, err = r.TryLock(ctx, "late")
		}
		if !errors.Is(err, fencedlock.ErrLateGrant) || !errors.Is(err, fencedlock.ErrNotAcquired) || strings.Contains(err.Error(), "\\x00") {
			t.Fatalf("Try %v lock answered %v late: %v, want ErrLateGrant naming the name", m, slow.delay, err)
		}
		var l *rwlock.Lease
		if m == rwlock.Read {
			l, err = other.TryLock(ctx, "late")
		} else {
			l, err = other.TryRLock(ctx, "late")
		}
		if err != nil {
			t.Fatalf("the other mode after a refused late %v grant: %v, want the grant released", m, err)
		}
		l.Release(ctx)

		slow.late.Store(1)
		if m == rwlock.Read {
			l, err = r.RLock(ctx, "late")
		} else {
			l, err = r.Lock(ctx, "late")
		}
		if err != nil || l.Err() != nil {
			t.Fatalf("waiting %v lock whose first grant came back late: %v, want the next attempt's lease", m, err)
		}
		l.Release(ctx)
	}
}
