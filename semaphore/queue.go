package semaphore

import (
	"context"

	"github.com/fencedlock/fencedlock"
)

// queueSuffix ends the lock key of a semaphore's queue (see QueueKey).
const queueSuffix = "/queue"

// QueueKey returns the lock key on which the waiters of the semaphore name
// queue, on a backend whose lock serves its waiters in arrival order (a
// [driver.WaitAcquirer]: Redis, etcd, PostgreSQL's Fair): name, then
// "/queue". Its holder is the first waiter, the only one trying the
// slots; the others wait for it on the server, in order. Distinct from
// every [SlotKey] of any name. Tools (inspect, list) show it as a lock; do
// not Acquire it with a Locker on the same store.
func QueueKey(name string) string { return name + queueSuffix }

// turn is the wait of a caller of Acquire for its turn among the waiters
// of a semaphore, where the backend's lock is FIFO: the lease of
// QueueKey(name) while it is the first waiter, released once it has a
// permit or gives up.
type turn struct {
	ls *fencedlock.Lease
}

// take waits until the caller is the first waiter of name (the lock
// QueueKey(name), granted in arrival order): an error wrapping
// fencedlock.ErrNotAcquired and ctx's error if ctx ends first, or
// ErrClosed. It does nothing if the caller is first already, or if the
// backend keeps no order (fifo false: the waiters then race, woken
// together).
func (t *turn) take(ctx context.Context, s *Semaphore, name string) (taken bool, err error) {
	if !s.fifo || t.ls != nil {
		return false, nil
	}
	ls, err := s.l.Acquire(ctx, QueueKey(name))
	if err != nil {
		return false, err
	}
	t.ls = ls
	return true, nil
}

// end gives the turn to the next waiter (the lease's Release runs
// detached from ctx's end, bounded by ReleaseTimeout).
func (t *turn) end(ctx context.Context) {
	if t.ls != nil {
		_ = t.ls.Release(ctx)
		t.ls = nil
	}
}
