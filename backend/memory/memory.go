// Package memory is an in-memory reference [driver.Backend]: every rule
// of the driver contract (TTL on every key, owner-checked renew and release,
// a fence that never goes back, wake-up on release) with no server.
//
// Use it in your own unit tests, and as the model when writing a backend of
// your own. Backends made by one [Store] share state, as independent
// processes sharing one lock server would; a Store lives only as long as
// the process, so it cannot protect anything across processes.
//
// [FencedStore] is the in-memory [fencing.Store], the guarded writes of the
// Redis and etcd backends for the unit tests of code that writes under a
// fence.
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
	"github.com/fencedlock/fencedlock/internal/closeonce"
)

// Store is the shared state of a set of backends: lock entries and fence
// counters. Its zero value is not usable; call [NewStore].
type Store struct {
	mu       sync.Mutex
	locks    map[string]entry
	fences   map[string]fencing.Token // never deleted: fences never go back
	watchers map[string]map[chan struct{}]struct{}
	terms    map[string]term                      // leaders' values (election.go)
	leaderWs map[string]map[*leaderWatch]struct{} // WatchLeader's watches (election.go)
	rw       map[string]*rwName                   // read-write locks (rwlock.go)
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
		terms:    make(map[string]term),
		leaderWs: make(map[string]map[*leaderWatch]struct{}),
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
	s.leaderChanged(key, time.Now())
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
		s.leaderChanged(key, now)
		return entry{}, false
	}
	return e, true
}

// Backend is one client of a Store. It implements [driver.Backend],
// [driver.Notifier], [driver.Inspector], [driver.Elector],
// [driver.RWLocker] and [driver.MultiLocker].
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
	_ driver.Elector   = (*Backend)(nil)
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

// lock checks that b is usable (open, ctx not done) and locks its Store:
// it returns the Store, whose mu the caller unlocks, and the time of the
// call.
func (b *Backend) lock(ctx context.Context) (*Store, time.Time, error) {
	if err := b.usable(ctx); err != nil {
		return nil, time.Time{}, err
	}
	b.s.mu.Lock()
	return b.s, time.Now(), nil
}

// Acquire implements [driver.Backend].
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	s, now, err := b.lock(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	defer s.mu.Unlock()
	if req.TTL <= 0 {
		return driver.Grant{}, fmt.Errorf("memory: TTL %v: %w", req.TTL, driver.ErrInvalid)
	}
	if e, ok := s.live(req.Key, now); ok {
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: e.expires.Sub(now)}
	}
	return s.grant(req, now), nil
}

// grant grants req.Key, which is free, to req.Owner with the key's next
// fence. s.mu must be held.
func (s *Store) grant(req driver.AcquireRequest, now time.Time) driver.Grant {
	fence := s.take(req.Key, req.Owner, now.Add(req.TTL))
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fence, TTL: req.TTL}
}

// take gives key to owner until expires with key's next fence, which it
// returns. s.mu must be held.
func (s *Store) take(key, owner string, expires time.Time) fencing.Token {
	fence := s.fences[key] + 1
	s.fences[key] = fence
	s.locks[key] = entry{owner: owner, fence: fence, expires: expires}
	return fence
}

// Renew implements [driver.Backend].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	s, now, err := b.lock(ctx)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
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
	s, now, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, ok := s.live(g.Key, now)
	if !ok || e.owner != g.Owner {
		return fmt.Errorf("memory: release %q: %w", g.Key, driver.ErrNotHeld)
	}
	s.free(g.Key)
	return nil
}

// free deletes key's lock and wakes its watchers. s.mu must be held.
func (s *Store) free(key string) {
	delete(s.locks, key)
	s.leaderChanged(key, time.Now())
	s.wake(key)
}

// wake notifies the watchers of key. s.mu must be held.
func (s *Store) wake(key string) {
	for ch := range s.watchers[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
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
	stop := b.addStop(func() {
		s.mu.Lock()
		delete(s.watchers[key], ch)
		if len(s.watchers[key]) == 0 {
			delete(s.watchers, key)
		}
		s.mu.Unlock()
	})
	return ch, stop, nil
}

// Inspect implements [driver.Inspector].
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	s, now, err := b.lock(ctx)
	if err != nil {
		return driver.Info{}, err
	}
	defer s.mu.Unlock()
	info := driver.Info{Fence: s.fences[key]}
	if e, ok := s.live(key, now); ok {
		info.Held, info.TTL, info.Holder = true, e.expires.Sub(now), driver.HolderID(e.owner)
	}
	return info, nil
}

// Close implements [driver.Backend]: it ends this backend's watches.
// Locks it granted stay until released or expired, as on a server.
func (b *Backend) Close() error {
	stops, first := closeonce.Take(&b.mu, &b.closed, &b.stops)
	if !first {
		return nil
	}
	for _, stop := range stops {
		stop()
	}
	return nil
}
