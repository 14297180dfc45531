//go:build unix

// run --limit N: COMMAND holds one of N permits of a semaphore instead of
// a lock. A permit is the lease of one slot lock (package semaphore), so
// everything run does with a lease (renewal, the supervisor's kill switch,
// the release once the tree is gone) is the same.

package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/multilock"
	"github.com/fencedlock/fencedlock/semaphore"
)

// taker takes what run holds while COMMAND runs: the lock KEY (a
// *fencedlock.Locker) or one permit of the semaphore KEY (*permits).
type taker interface {
	TryAcquire(ctx context.Context, key string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error)
	Acquire(ctx context.Context, key string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error)
}

// permits takes one of limit permits of a semaphore: the lease of one of
// its slot locks.
type permits struct {
	sem   *semaphore.Semaphore
	limit int
}

// TryAcquire makes one attempt at each slot of the semaphore name.
func (p *permits) TryAcquire(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	pm, err := p.sem.TryAcquire(ctx, name, p.limit, opts...)
	if err != nil {
		return nil, err
	}
	return pm.Lease, nil
}

// Acquire waits for a permit of the semaphore name.
func (p *permits) Acquire(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	pm, err := p.sem.Acquire(ctx, name, p.limit, opts...)
	if err != nil {
		return nil, err
	}
	return pm.Lease, nil
}

// newTaker returns run's taker on b for the flags: a Locker, or with
// --limit above 1 a Semaphore; and the function that closes it.
func newTaker(b driver.Backend, f *runFlags) (taker, func(), error) {
	if f.rw.mode() != 0 {
		return newRWTaker(b, f)
	}
	opts := fencedlock.Options{TTL: f.ttl}
	if len(f.keys) > 0 {
		m, err := multilock.New(b, opts)
		if err != nil {
			return nil, nil, err
		}
		return &sets{m: m, keys: f.keys}, func() { _ = m.Close() }, nil
	}
	if f.limit > 1 {
		s, err := semaphore.New(b, opts)
		if err != nil {
			return nil, nil, err
		}
		return &permits{sem: s, limit: f.limit}, func() { _ = s.Close() }, nil
	}
	l, err := fencedlock.New(b, opts)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { _ = l.Close() }, nil
}

// validateTarget checks KEY, and with a limit above 1 the longest of its
// slot keys, before anything is sent.
func validateTarget(key string, limit int) error {
	if limit < 1 || limit > semaphore.MaxLimit {
		return fmt.Errorf("--limit %d outside [1, %d]", limit, semaphore.MaxLimit)
	}
	if err := fencedlock.ValidateKey(key); err != nil {
		return err
	}
	if limit == 1 {
		return nil
	}
	return fencedlock.ValidateKey(semaphore.SlotKey(key, limit-1))
}

// slotOf returns the slot of a lease taken on the semaphore name of limit
// slots: the one whose SlotKey is the lease's key; -1 if none is.
func slotOf(name string, limit int, lease *fencedlock.Lease) int {
	for i := range limit {
		if semaphore.SlotKey(name, i) == lease.Key() {
			return i
		}
	}
	return -1
}

// commandVars returns the variables run gives COMMAND for the lease on
// key: FENCEDLOCK_KEY (KEY as given), _FENCE and _HOLDER (the lease's),
// and for a permit FENCEDLOCK_SLOT, its slot: the fence is that slot's.
func commandVars(key string, lease *fencedlock.Lease, t taker) []string {
	if s, ok := t.(*sets); ok {
		return append(s.setVars(), "FENCEDLOCK_HOLDER="+lease.Holder())
	}
	vars := []string{
		"FENCEDLOCK_KEY=" + key,
		"FENCEDLOCK_FENCE=" + lease.Fence().String(),
		"FENCEDLOCK_HOLDER=" + lease.Holder(),
	}
	if p, ok := t.(*permits); ok {
		vars = append(vars, "FENCEDLOCK_SLOT="+strconv.Itoa(slotOf(key, p.limit, lease)))
	}
	return vars
}

// inspectSlots reads the state of every slot of the semaphore name of
// limit slots, in slot order; each read is bounded by inspectTimeout.
func inspectSlots(ctx context.Context, in driver.Inspector, name string, limit int) ([]driver.Info, error) {
	infos := make([]driver.Info, limit)
	for i := range limit {
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		info, err := in.Inspect(ictx, semaphore.SlotKey(name, i))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("slot %d: %w", i, err)
		}
		infos[i] = info
	}
	return infos, nil
}

// describePermits returns " (N held; the soonest lease ends in T unless
// renewed)" for messages about the semaphore name, or "" if the backend
// cannot tell.
func describePermits(ctx context.Context, b driver.Backend, name string, limit int) string {
	in, ok := b.(driver.Inspector)
	if !ok {
		return ""
	}
	infos, err := inspectSlots(ctx, in, name, limit)
	if err != nil {
		if ctx.Err() != nil {
			return ""
		}
		return fmt.Sprintf(" (cannot tell by whom: %v)", err)
	}
	held, soonest := 0, time.Duration(0)
	for _, info := range infos {
		if info.Held {
			held++
			if info.TTL > 0 && (soonest == 0 || info.TTL < soonest) {
				soonest = info.TTL
			}
		}
	}
	if held < limit {
		return fmt.Sprintf(" (%d of %d held right now; retrying)", held, limit)
	}
	if soonest == 0 {
		return ""
	}
	return fmt.Sprintf(" (the soonest lease ends in %v unless renewed)", human.Duration(soonest))
}
