package multilock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// MaxKeys is the largest set Acquire takes: [driver.MaxMultiKeys].
const MaxKeys = driver.MaxMultiKeys

// Locker takes sets of keys on one backend. It is safe for concurrent
// use.
type Locker struct {
	l *fencedlock.Locker
}

// New returns a Locker of sets on b, which must implement
// [driver.MultiLocker] (memory, etcd, both Redis backends); otherwise the error
// wraps [driver.ErrInvalid]. opts are those of [fencedlock.New]: the
// sets' TTL, renewal, safety margin and the waiters' retry delays. As
// with a fencedlock.Locker, the caller closes b after the Locker.
func New(b driver.Backend, opts fencedlock.Options) (*Locker, error) {
	m, ok := b.(driver.MultiLocker)
	if !ok {
		return nil, fmt.Errorf("multilock: %T takes no sets of keys (not a driver.MultiLocker): %w", b, driver.ErrInvalid)
	}
	l, err := fencedlock.New(newView(b, m), opts)
	if err != nil {
		return nil, fmt.Errorf("multilock: %w", err)
	}
	return &Locker{l: l}, nil
}

// Close releases every set the Locker holds and ends waiting Acquires
// with errors wrapping [fencedlock.ErrClosed] (see [fencedlock.Locker.Close]).
func (m *Locker) Close() error { return m.l.Close() }

// Acquire blocks until the caller holds every key of keys, or ctx is
// done. The set is taken in one step on the server, all or nothing: while
// any key is held by another owner nothing is taken, and Acquire waits
// with the Locker's backoff (or the holder's remaining TTL) and tries the
// whole set again. On a backend that is a [driver.Notifier] (memory, both
// Redis backends, etcd) the wait also ends when any key of the set is
// released (it watches them all). Waiters are not served in order.
//
// keys are 1 to [MaxKeys] distinct names, in any order (the Lease has
// them sorted); an empty set, a duplicate, too many keys, an invalid key
// or a set whose keys together are longer than about
// [driver.MaxKeyLen] bytes fail with an error wrapping [driver.ErrInvalid]
// before anything is sent.
//
// When ctx ends first the error wraps [fencedlock.ErrNotAcquired] and no
// key is left taken: an attempt whose outcome is unknown is followed by
// an owner-checked release of the whole set, as for a single key.
//
// A Locker is not reentrant: on a context that comes from a lease of this
// Locker that still holds a key of keys ([Lease.Context], the context Do
// passed to fn, or one derived from either), Acquire, TryAcquire and Do
// fail at once with an error wrapping [fencedlock.ErrHeldByLocker] and
// [fencedlock.ErrNotAcquired], whether the set is the same or only shares
// a key: such an acquire would wait for itself.
func (m *Locker) Acquire(ctx context.Context, keys []string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return m.acquire(ctx, keys, opts, true)
}

// TryAcquire makes one attempt to take the set keys (see Acquire). If any
// key is held by another owner it takes nothing and the error wraps
// [fencedlock.ErrNotAcquired] (a *[driver.HeldError] names that key).
func (m *Locker) TryAcquire(ctx context.Context, keys []string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return m.acquire(ctx, keys, opts, false)
}

func (m *Locker) acquire(ctx context.Context, keys []string, opts []fencedlock.LeaseOption, wait bool) (*Lease, error) {
	sorted, err := Normalize(keys)
	if err != nil {
		return nil, err
	}
	if err := m.reentry(ctx, sorted); err != nil { // reentry.go
		return nil, err
	}
	sink := &fenceSink{}
	ctx = context.WithValue(ctx, sinkKey{}, sink)
	var ls *fencedlock.Lease
	if wait {
		ls, err = m.l.Acquire(ctx, setKey(sorted), opts...)
	} else {
		ls, err = m.l.TryAcquire(ctx, setKey(sorted), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("multilock: acquire %q: %w", sorted, err)
	}
	fences := sink.fences.Load()
	if fences == nil {
		// Not reachable with view: every grant fills the sink first.
		_ = ls.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("multilock: acquire %q: the grant carried no fences", sorted)
	}
	l := &Lease{m: m, ls: ls, keys: sorted, fences: *fences}
	l.ctx = withHeld(ls.Context(), l)
	return l, nil
}

// Do acquires keys (waiting as Acquire does), runs fn while holding them
// and releases them. fn's context ends when ctx is done or the set's
// lease ends early; if the lease was lost before the release, Do's error
// wraps [fencedlock.ErrLeaseLost] (see [fencedlock.Locker.Do]). fn's
// context comes from the lease: a nested acquire on it of a set with a key
// in common fails at once (see Acquire).
func (m *Locker) Do(ctx context.Context, keys []string, fn func(context.Context, *Lease) error, opts ...fencedlock.LeaseOption) error {
	ls, err := m.Acquire(ctx, keys, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(withHeld(ctx, ls))
	defer cancel(nil)
	stop := context.AfterFunc(ls.Context(), func() { cancel(context.Cause(ls.Context())) })
	defer stop()
	ferr := fn(fctx, ls)
	rerr := ls.Release(context.WithoutCancel(ctx))
	if lost := ls.Err(); errors.Is(lost, fencedlock.ErrLeaseLost) {
		return errors.Join(ferr, lost)
	}
	return errors.Join(ferr, rerr)
}

// Normalize returns keys sorted, or an error wrapping [driver.ErrInvalid]
// for an empty set, a duplicate key, more than [MaxKeys] keys, an invalid
// key, or a set too long to encode as one key of [driver.MaxKeyLen]
// bytes (each key counts its length plus a few bytes).
func Normalize(keys []string) ([]string, error) {
	switch {
	case len(keys) == 0:
		return nil, fmt.Errorf("multilock: empty set of keys: %w", driver.ErrInvalid)
	case len(keys) > MaxKeys:
		return nil, fmt.Errorf("multilock: %d keys exceed MaxKeys %d: %w", len(keys), MaxKeys, driver.ErrInvalid)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := driver.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("multilock: %w", err)
		}
		if i > 0 && sorted[i-1] == k {
			return nil, fmt.Errorf("multilock: key %q given twice: %w", k, driver.ErrInvalid)
		}
	}
	if n := len(setKey(sorted)); n > driver.MaxKeyLen {
		return nil, fmt.Errorf("multilock: the set's keys take %d bytes encoded, more than MaxKeyLen %d: %w", n, driver.MaxKeyLen, driver.ErrInvalid)
	}
	return sorted, nil
}

// Lease is the lease of a set of keys: one lease for all of them, renewed
// by the watchdog of a [fencedlock.Locker] as one. If the server no longer
// holds any key of the set for this owner (deleted, expired, evicted), the
// renewal fails and the whole lease is lost; its Err then wraps
// [fencedlock.ErrLeaseLost] and a *[driver.LostKeyError] naming the key.
// Printing a Lease shows its keys and fences, never its owner token.
type Lease struct {
	m      *Locker
	ls     *fencedlock.Lease
	ctx    context.Context // ls.Context(), marked as this lease's (reentry.go)
	keys   []string
	fences []fencing.Token
}

// Lease returns the set's lease as the [fencedlock.Locker] underneath
// holds it, for code built on fencedlock.Lease (the CLI's supervisor): the
// same lease, whose Deadline, Err, Renew and Release are this Lease's and
// whose Context ends with this Lease's Context. Its Key is the set encoded as one name (for logs) and its
// Fence the fence of the first key of Keys: guard another key's resource
// with [Lease.Fence] of that key.
func (l *Lease) Lease() *fencedlock.Lease { return l.ls }

// Keys returns the set's keys, sorted.
func (l *Lease) Keys() []string { return slices.Clone(l.keys) }

// Fences returns the keys' fences: Fences()[i] is the fence of Keys()[i],
// strictly greater than every fence granted before on that key (to a set
// or to a single-key lease on the same store).
func (l *Lease) Fences() []fencing.Token { return slices.Clone(l.fences) }

// Fence returns the fence of key, or false if key is not in the set.
func (l *Lease) Fence(key string) (fencing.Token, bool) {
	i, ok := slices.BinarySearch(l.keys, key)
	if !ok {
		return 0, false
	}
	return l.fences[i], true
}

// Holder returns the holder id of the set's owner token ([driver.HolderID]),
// the same for every key: guards of package fencing take it with a fence.
func (l *Lease) Holder() string { return l.ls.Holder() }

// TTL returns the lease the server applied to every key at the grant.
func (l *Lease) TTL() time.Duration { return l.ls.TTL() }

// Context returns a context that ends when the lease ends (released or
// lost), before the local deadline. An acquire on it of a set with a key
// in common with this one fails at once (see [Locker.Acquire]).
func (l *Lease) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lease) Done() <-chan struct{} { return l.ls.Done() }

// Err returns nil while the set is held, then an error wrapping
// [fencedlock.ErrLeaseLost] (and the reason: for a key found gone, a
// *[driver.LostKeyError] naming it) or [fencedlock.ErrReleased].
func (l *Lease) Err() error { return l.ls.Err() }

// Deadline returns the local deadline (see [fencedlock.Lease.Deadline]).
func (l *Lease) Deadline() time.Time { return l.ls.Deadline() }

// Renew renews every key of the set now (see [fencedlock.Lease.Renew]).
func (l *Lease) Renew(ctx context.Context) error { return l.ls.Renew(ctx) }

// Release deletes every key of the set this owner still holds, in one
// step (see [fencedlock.Lease.Release]).
func (l *Lease) Release(ctx context.Context) error { return l.ls.Release(ctx) }

// String returns the keys and their fences.
func (l *Lease) String() string {
	return fmt.Sprintf("multilock.Lease{Keys:%q Fences:%v Holder:%s}", l.keys, l.fences, l.Holder())
}
