package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Sets of keys (package multilock) under the Store's mutex: each key is
// the lock of Acquire, so single-key leases and sets exclude each other.
var _ driver.MultiLocker = (*Backend)(nil)

// AcquireMulti implements [driver.MultiLocker]: every key of req.Keys is
// taken, with the next fence of each, or none (a *driver.HeldError names
// the first key held by another owner).
func (b *Backend) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	if req.TTL <= 0 || len(req.Keys) == 0 {
		return driver.MultiGrant{}, fmt.Errorf("memory: acquire set: %d keys, TTL %v: %w", len(req.Keys), req.TTL, driver.ErrInvalid)
	}
	s, now, err := b.lockStore(ctx)
	if err != nil {
		return driver.MultiGrant{}, err
	}
	defer s.mu.Unlock()
	for _, k := range req.Keys {
		// A key of this owner (a retried request) is taken again, with a
		// new fence.
		if e, ok := s.live(k, now); ok && e.owner != req.Owner {
			return driver.MultiGrant{}, &driver.HeldError{Key: k, RetryAfter: e.expires.Sub(now)}
		}
	}
	fences := make([]fencing.Token, len(req.Keys))
	for i, k := range req.Keys {
		fences[i] = s.take(k, req.Owner, now.Add(req.TTL))
	}
	return driver.MultiGrant{Keys: req.Keys, Owner: req.Owner, Fences: fences, TTL: req.TTL}, nil
}

// RenewMulti implements [driver.MultiLocker]: all keys of g or none; a
// key gone returns a *driver.LostKeyError.
func (b *Backend) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	s, now, err := b.lockStore(ctx)
	if err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	for _, k := range g.Keys {
		if e, ok := s.live(k, now); !ok || e.owner != g.Owner {
			return 0, fmt.Errorf("memory: renew set: %w", &driver.LostKeyError{Key: k})
		}
	}
	for _, k := range g.Keys {
		e := s.locks[k]
		e.expires = now.Add(ttl)
		s.locks[k] = e
	}
	return ttl, nil
}

// ReleaseMulti implements [driver.MultiLocker]: it deletes the keys of g
// that g.Owner holds and wakes their watchers; a key not held returns a
// *driver.LostKeyError (the others are deleted all the same).
func (b *Backend) ReleaseMulti(ctx context.Context, g driver.MultiGrant) error {
	s, now, err := b.lockStore(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	var lost error
	for _, k := range g.Keys {
		if e, ok := s.live(k, now); ok && e.owner == g.Owner {
			s.free(k)
		} else if lost == nil {
			lost = fmt.Errorf("memory: release set: %w", &driver.LostKeyError{Key: k})
		}
	}
	return lost
}

// lockStore checks that b is usable and locks its Store: the caller
// unlocks s.mu. now is the time of the operation.
func (b *Backend) lockStore(ctx context.Context) (s *Store, now time.Time, err error) {
	if err := b.usable(ctx); err != nil {
		return nil, time.Time{}, err
	}
	b.s.mu.Lock()
	return b.s, time.Now(), nil
}
