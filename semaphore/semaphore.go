package semaphore

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// MaxLimit is the largest limit [Semaphore.Acquire] accepts: a waiting
// Acquire tries, and watches, every one of its limit slots.
const MaxLimit = 1024

// slotSep separates a semaphore's name from a slot number in its slot keys.
const slotSep = "/permit/"

// SlotKey returns the lock key of slot of the semaphore name: name, then
// "/permit/", then the slot number in decimal. Distinct (name, slot) pairs
// have distinct keys. Tools (inspect, list) find a permit's lock under it;
// do not Acquire such a key with a Locker on the same store.
func SlotKey(name string, slot int) string {
	return name + slotSep + strconv.Itoa(slot)
}

// Semaphore grants permits of counting semaphores on one backend. It is
// safe for concurrent use.
type Semaphore struct {
	l      *fencedlock.Locker
	slots  *fencedlock.Locker  // over a view of the backend, if it is a driver.SlotAcquirer; else nil
	sa     driver.SlotAcquirer // the backend as a SlotAcquirer, or nil
	notify driver.Notifier     // nil if the backend announces no releases
	fifo   bool                // the backend's lock serves waiters in order (a driver.WaitAcquirer): waiters queue on QueueKey
	opts   fencedlock.Options
	closed chan struct{} // closed by Close: ends the waits
	once   sync.Once
}

// New returns a Semaphore on b, with a Locker of its own made with opts
// (the permits' TTL, renewal, safety margin and the waiters' retry
// delays). Any [driver.Backend] will do; one that is a [driver.Notifier]
// wakes waiters when a permit is released instead of having them poll; one
// that is a [driver.SlotAcquirer] (memory, Redis) has each attempt take
// the first free slot in one step (one round trip on Redis) instead of
// trying the slots one at a time. As with a Locker, the caller closes b
// after the Semaphore.
func New(b driver.Backend, opts fencedlock.Options) (*Semaphore, error) {
	l, err := fencedlock.New(b, opts)
	if err != nil {
		return nil, fmt.Errorf("semaphore: %w", err)
	}
	s := &Semaphore{l: l, opts: l.Options(), closed: make(chan struct{})}
	s.notify, _ = b.(driver.Notifier)
	_, s.fifo = b.(driver.WaitAcquirer)
	if sa, ok := b.(driver.SlotAcquirer); ok {
		// A root Locker over the view: a permit taken in one step is a
		// Lease as any other (watchdog, loss, late-grant refusal).
		if s.slots, err = fencedlock.New(&view{b: b, sa: sa}, opts); err != nil {
			return nil, errors.Join(fmt.Errorf("semaphore: %w", err), l.Close())
		}
		s.sa = sa
	}
	return s, nil
}

// Close releases every permit the Semaphore holds and closes its Locker:
// waiting Acquires return at once with errors wrapping
// [fencedlock.ErrClosed], as do all calls after Close.
func (s *Semaphore) Close() error {
	s.once.Do(func() { close(s.closed) })
	err := s.l.Close()
	if s.slots != nil {
		err = errors.Join(err, s.slots.Close())
	}
	return err
}

// Permit is one of a semaphore's permits, held by the caller of Acquire.
// It is the lease of one slot's lock: Fence, Holder, Context, Done, Err,
// Deadline, Renew and Release are the lease's, and the permit ends with
// it. Its Key is [SlotKey] of its name and slot.
type Permit struct {
	*fencedlock.Lease
	name string
	slot int
}

// Name returns the semaphore's name.
func (p *Permit) Name() string { return p.name }

// Slot returns the permit's slot, in 0..limit-1 of the Acquire that took
// it. Fence is strictly greater than the fence of every earlier permit of
// the same slot, so a resource partitioned by slot rejects a stale holder
// of its slot with the guards of package fencing.
func (p *Permit) Slot() int { return p.slot }

// Acquire blocks until the caller holds one of the limit permits of the
// semaphore name, or ctx is done. A permit is the lease of one slot in
// 0..limit-1 (see [SlotKey]): Acquire tries the slots, in one step on a
// [driver.SlotAcquirer] above limit 1 (the first free slot), else once
// each from a random one, and while all are held waits for a release announced by the
// backend (a [driver.Notifier]: once every slot was found held, each is
// watched and tried again at once, so no release is missed) or, at the latest,
// the shortest remaining TTL a holder reported, or MaxRetryDelay; without
// a Notifier, or while a slot may come free at a time no holder reported
// (a holder that reports no remaining TTL), it polls with the Locker's
// backoff. A crashed holder's slot
// is free once its TTL ran out on the server.
//
// Where the backend's lock serves its waiters in arrival order (a
// [driver.WaitAcquirer]: Redis, etcd, PostgreSQL's Fair), so does the
// semaphore: a caller that finds every slot held queues on the lock
// [QueueKey](name), and only the first waiter (its holder) tries and
// watches the slots; it gives the queue to the next once it has a permit,
// or when it gives up. A caller that arrives while a permit is free takes
// it at once, without queueing (one round trip). The first waiter blocks
// those behind it even when they pass a higher limit than its own and a
// higher slot is free. Elsewhere the waiters race, woken together.
//
// Callers that pass different limits for one name each take only slots
// below their own limit: at every moment, the valid permits in slots
// 0..L-1 are at most L for every L, so a caller with limit L never shares
// the semaphore with more than L-1 other holders of those slots, and all
// valid permits together are at most the largest limit in use. A limit
// lowered while permits of higher slots are held takes full effect once
// they are released.
//
// When ctx ends first, the error wraps [fencedlock.ErrNotAcquired] and
// ctx.Err(), and no slot is left taken (an attempt of unknown outcome is
// cleaned up within the Locker's ReleaseTimeout; if that clean-up cannot
// reach the server, a warning is logged and the slot comes back at its
// TTL). An error no retry can fix
// (ErrPermanent, ErrInvalid, ErrClosed) ends the wait at once; a limit
// outside [1, MaxLimit] or a name whose slot keys are too long fails with
// ErrInvalid before anything is sent. opts set the permit's lease options.
func (s *Semaphore) Acquire(ctx context.Context, name string, limit int, opts ...fencedlock.LeaseOption) (*Permit, error) {
	if err := validate(name, limit); err != nil {
		return nil, fmt.Errorf("semaphore: acquire %q: %w", name, err)
	}
	w := s.newWaiter()
	defer w.stop()
	var t turn
	defer t.end(ctx) // once a permit is taken (or the wait ends), the next waiter's turn
	oneStep := s.oneStep(name, limit)
	for watched := false; ; {
		p, hint, unknown, last, err := s.sweep(ctx, name, limit, opts, oneStep)
		if p != nil || err != nil {
			return p, err
		}
		// Every slot held: queue behind the earlier waiters (FIFO
		// backends), then, first in line, try the slots again at once.
		if taken, err := t.take(ctx, s, name); err != nil {
			return nil, fmt.Errorf("semaphore: acquire %q: %w", name, errors.Join(err, last))
		} else if taken {
			continue
		}
		if !watched {
			watched = true
			if w.watch(ctx, s.closed, s.notify, name, limit) {
				continue // sweep again, watched: a release before the watches began is not missed
			}
		}
		if err := w.wait(ctx, s.closed, hint, unknown); err != nil {
			return nil, fmt.Errorf("semaphore: acquire %q: %w", name, errors.Join(err, last))
		}
	}
}

// TryAcquire makes one attempt at the limit slots of name, as Acquire's
// first (one step on a SlotAcquirer, else one per slot from a random one),
// and returns the permit it gets. If every slot is held the error wraps
// [fencedlock.ErrNotAcquired].
func (s *Semaphore) TryAcquire(ctx context.Context, name string, limit int, opts ...fencedlock.LeaseOption) (*Permit, error) {
	if err := validate(name, limit); err != nil {
		return nil, fmt.Errorf("semaphore: try acquire %q: %w", name, err)
	}
	p, _, _, last, err := s.sweep(ctx, name, limit, opts, s.oneStep(name, limit))
	if p == nil && err == nil {
		err = fmt.Errorf("semaphore: try acquire %q: no permit of %d taken: %w", name, limit, errors.Join(fencedlock.ErrNotAcquired, last))
	}
	return p, err
}

func validate(name string, limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("limit %d outside [1, %d]: %w", limit, MaxLimit, fencedlock.ErrInvalid)
	}
	if err := driver.ValidateKey(name); err != nil {
		return err
	}
	return driver.ValidateKey(SlotKey(name, limit-1))
}

// oneStep reports whether the slots of name below limit are taken in one
// step (the backend is a SlotAcquirer that can take them together). Not
// at limit 1: the one slot's TryAcquire is already one step, and a lock's.
func (s *Semaphore) oneStep(name string, limit int) bool {
	return limit > 1 && s.sa != nil && s.sa.SlotsInOneStep(slotKeys(name, limit))
}

// sweep tries each slot once: in one step, the first free slot in slot
// order (oneStep), or one TryAcquire per slot from a random one. It
// returns a permit; or, when no slot was taken, nil, the shortest
// remaining TTL the holders reported (0 if none did), whether some slot
// may come free sooner than that unannounced (unknown: a holder reported
// no remaining TTL, as Redis does for one in its last millisecond, or the
// slot is held by this Semaphore's Locker, or its attempt failed) and the
// last error other than a holder's; or an error that ends the wait.
func (s *Semaphore) sweep(ctx context.Context, name string, limit int, opts []fencedlock.LeaseOption, oneStep bool) (p *Permit, hint time.Duration, unknown bool, last, err error) {
	first, tries := mrand.IntN(limit), limit
	if oneStep {
		tries = 1
	}
	for i := range tries {
		if ctx.Err() != nil {
			return nil, 0, false, nil, fmt.Errorf("semaphore: acquire %q: %w", name, errors.Join(fencedlock.ErrNotAcquired, ctx.Err(), last))
		}
		l, key := s.l, SlotKey(name, (first+i)%limit)
		if oneStep {
			l, key = s.slots, viewKey(name, limit)
		}
		ls, err := l.TryAcquire(ctx, key, opts...)
		var he *fencedlock.HeldError
		switch {
		case err == nil:
			return &Permit{Lease: ls, name: name, slot: slotOf(name, ls.Key())}, 0, false, nil, nil
		case final(err):
			return nil, 0, false, nil, fmt.Errorf("semaphore: acquire %q: %w", name, err)
		case errors.As(err, &he) && he.RetryAfter > 0:
			if hint == 0 || he.RetryAfter < hint {
				hint = he.RetryAfter
			}
		default:
			unknown = true
			if !errors.Is(err, fencedlock.ErrNotAcquired) || errors.Is(err, fencedlock.ErrLateGrant) {
				last = err // kept: it says why the wait got no permit
			}
		}
	}
	return nil, hint, unknown, last, nil
}

// final reports whether err ends a wait: no retry can fix it.
func final(err error) bool {
	return errors.Is(err, fencedlock.ErrPermanent) || errors.Is(err, fencedlock.ErrInvalid) || errors.Is(err, fencedlock.ErrClosed)
}
