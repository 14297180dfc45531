// Package memory is an in-memory reference [fencedlock.Backend]: every rule
// of the driver contract (TTL on every key, owner-checked renew and release,
// a fence that never goes back, wake-up on release) with no server.
//
// Use it in your own unit tests, and as the model when writing a backend of
// your own. Backends made by one [Store] share state, as independent
// processes sharing one lock server would; a Store lives only as long as
// the process, so it cannot protect anything across processes.
//
// Time is read with time.Now, so tests using testing/synctest see expiry
// follow their fake clock.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
)

// Store is the shared state of a set of backends: lock entries and fence
// counters. Its zero value is not usable; call [NewStore].
type Store struct {
	mu       sync.Mutex
	locks    map[string]entry
	fences   map[string]fencing.Token // never deleted: fences never go back
	watchers map[string]map[chan struct{}]struct{}
}

type entry struct {
	owner   string
	fence   fencing.Token
	expires time.Time
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		locks:    make(map[string]entry),
		fences:   make(map[string]fencing.Token),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
}

// New returns a Backend on a Store of its own.
func New() *Backend { return NewStore().Backend() }

// Backend returns a new, independent Backend on s, as if from another
// process: closing it does not affect the others.
func (s *Store) Backend() *Backend { return &Backend{s: s} }

// Invalidate deletes key's lock behind its holder's back, as an operator or
// a server failure would. Waiters are not notified (as with expiry). It
// reports whether a lock was deleted.
func (s *Store) Invalidate(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live(key, time.Now())
	delete(s.locks, key)
	return ok
}

// live returns the unexpired entry of key, deleting an expired one.
// s.mu must be held.
func (s *Store) live(key string, now time.Time) (entry, bool) {
	e, ok := s.locks[key]
	if !ok {
		return entry{}, false
	}
	if !now.Before(e.expires) {
		delete(s.locks, key)
		return entry{}, false
	}
	return e, true
}

// Backend is one client of a Store. It implements [fencedlock.Backend],
// [fencedlock.Notifier] and [fencedlock.Inspector].
type Backend struct {
	s      *Store
	mu     sync.Mutex
	closed bool
	nextID uint64
	stops  map[uint64]func() // open watches, ended by Close
}

var (
	_ fencedlock.Backend   = (*Backend)(nil)
	_ fencedlock.Notifier  = (*Backend)(nil)
	_ fencedlock.Inspector = (*Backend)(nil)
)

func (b *Backend) usable(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("memory: %w", fencedlock.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	return nil
}

// Acquire implements [fencedlock.Backend].
func (b *Backend) Acquire(ctx context.Context, req fencedlock.AcquireRequest) (fencedlock.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return fencedlock.Grant{}, err
	}
	if req.TTL <= 0 {
		return fencedlock.Grant{}, fmt.Errorf("memory: TTL %v: %w", req.TTL, fencedlock.ErrInvalid)
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e, ok := s.live(req.Key, now); ok {
		return fencedlock.Grant{}, &fencedlock.HeldError{Key: req.Key, RetryAfter: e.expires.Sub(now)}
	}
	fence := s.fences[req.Key] + 1
	s.fences[req.Key] = fence
	s.locks[req.Key] = entry{owner: req.Owner, fence: fence, expires: now.Add(req.TTL)}
	return fencedlock.Grant{Key: req.Key, Owner: req.Owner, Fence: fence, TTL: req.TTL}, nil
}

// Renew implements [fencedlock.Backend].
func (b *Backend) Renew(ctx context.Context, g fencedlock.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.usable(ctx); err != nil {
		return 0, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e, ok := s.live(g.Key, now)
	if !ok || e.owner != g.Owner {
		return 0, fmt.Errorf("memory: renew %q: %w", g.Key, fencedlock.ErrNotHeld)
	}
	e.expires = now.Add(ttl)
	s.locks[g.Key] = e
	return ttl, nil
}

// Release implements [fencedlock.Backend]. It wakes the key's watchers.
func (b *Backend) Release(ctx context.Context, g fencedlock.Grant) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(g.Key, time.Now())
	if !ok || e.owner != g.Owner {
		return fmt.Errorf("memory: release %q: %w", g.Key, fencedlock.ErrNotHeld)
	}
	delete(s.locks, g.Key)
	for ch := range s.watchers[g.Key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

// Watch implements [fencedlock.Notifier].
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := b.usable(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	s := b.s
	s.mu.Lock()
	if s.watchers[key] == nil {
		s.watchers[key] = make(map[chan struct{}]struct{})
	}
	s.watchers[key][ch] = struct{}{}
	s.mu.Unlock()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.watchers[key], ch)
			if len(s.watchers[key]) == 0 {
				delete(s.watchers, key)
			}
			s.mu.Unlock()
			b.mu.Lock()
			delete(b.stops, id)
			b.mu.Unlock()
		})
	}
	if b.stops == nil {
		b.stops = make(map[uint64]func())
	}
	b.stops[id] = stop
	b.mu.Unlock()
	return ch, stop, nil
}

// Inspect implements [fencedlock.Inspector].
func (b *Backend) Inspect(ctx context.Context, key string) (fencedlock.Info, error) {
	if err := b.usable(ctx); err != nil {
		return fencedlock.Info{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	info := fencedlock.Info{Fence: s.fences[key]}
	if e, ok := s.live(key, now); ok {
		info.Held, info.TTL, info.Holder = true, e.expires.Sub(now), fencedlock.HolderID(e.owner)
	}
	return info, nil
}

// Close implements [fencedlock.Backend]: it ends this backend's watches.
// Locks it granted stay until released or expired, as on a server.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	stops := b.stops
	b.stops = nil
	b.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	return nil
}
