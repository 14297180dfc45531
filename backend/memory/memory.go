// Package memory is an in-memory reference [driver.Backend]: every rule
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

	"github.com/fencedlock/fencedlock/driver"
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

// Backend is one client of a Store. It implements [driver.Backend],
// [driver.Notifier] and [driver.Inspector].
type Backend struct {
	s      *Store
	mu     sync.Mutex
	closed bool
	nextID uint64
	stops  map[uint64]func() // open watches, ended by Close
}

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Notifier  = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
)

func (b *Backend) usable(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("memory: %w", driver.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	return nil
}

// Acquire implements [driver.Backend].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	if req.TTL <= 0 {
		return driver.Grant{}, fmt.Errorf("memory: TTL %v: %w", req.TTL, driver.ErrInvalid)
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e, ok := s.live(req.Key, now); ok {
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: e.expires.Sub(now)}
	}
	fence := s.fences[req.Key] + 1
	s.fences[req.Key] = fence
	s.locks[req.Key] = entry{owner: req.Owner, fence: fence, expires: now.Add(req.TTL)}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fence, TTL: req.TTL}, nil
}

// Renew implements [driver.Backend].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.usable(ctx); err != nil {
		return 0, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	e, ok := s.live(g.Key, now)
	if !ok || e.owner != g.Owner {
		return 0, fmt.Errorf("memory: renew %q: %w", g.Key, driver.ErrNotHeld)
	}
	e.expires = now.Add(ttl)
	s.locks[g.Key] = e
	return ttl, nil
}

// Release implements [driver.Backend]. It wakes the key's watchers.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.live(g.Key, time.Now())
	if !ok || e.owner != g.Owner {
		return fmt.Errorf("memory: release %q: %w", g.Key, driver.ErrNotHeld)
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

// Watch implements [driver.Notifier].
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

// Inspect implements [driver.Inspector].
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Info{}, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	info := driver.Info{Fence: s.fences[key]}
	if e, ok := s.live(key, now); ok {
		info.Held, info.TTL, info.Holder = true, e.expires.Sub(now), driver.HolderID(e.owner)
	}
	return info, nil
}

// Close implements [driver.Backend]: it ends this backend's watches.
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
