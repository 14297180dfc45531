package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Read-write locks ([driver.RWLocker]): a name's readers, writer, waiting
// writers' intents and fence counter, beside (and apart from) the plain
// lock of the same name.

var _ driver.RWLocker = (*Backend)(nil)

// rwName is the state of one read-write lock's name.
type rwName struct {
	fence   fencing.Token        // the last fence granted, read or write; never goes back
	writer  entry                // the writer, if writer.owner != ""
	readers map[string]entry     // by owner token
	intents map[string]time.Time // waiting writers' intents: owner token -> expiry
}

// rwState returns the state of name, expired leases and intents dropped.
// s.mu must be held.
func (s *Store) rwState(name string, now time.Time) *rwName {
	if s.rw == nil {
		s.rw = make(map[string]*rwName)
	}
	n := s.rw[name]
	if n == nil {
		n = &rwName{readers: make(map[string]entry), intents: make(map[string]time.Time)}
		s.rw[name] = n
	}
	if n.writer.owner != "" && !now.Before(n.writer.expires) {
		n.writer = entry{}
	}
	for o, e := range n.readers {
		if !now.Before(e.expires) {
			delete(n.readers, o)
		}
	}
	for o, exp := range n.intents {
		if !now.Before(exp) {
			delete(n.intents, o)
		}
	}
	return n
}

// AcquireRW implements [driver.RWLocker].
func (b *Backend) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return driver.Grant{}, err
	}
	if req.TTL <= 0 || (req.Mode != driver.Read && req.Mode != driver.Write) {
		return driver.Grant{}, fmt.Errorf("memory: %v acquire, TTL %v: %w", req.Mode, req.TTL, driver.ErrInvalid)
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	n := s.rwState(req.Key, now)
	// A retried request (its reply lost) of an owner that holds the name
	// in this mode gets its own lease again, with its fence, reset to the
	// TTL, whoever waits, as rwlock.lua answers: refused, the owner would
	// wait for itself (a writer with its intent keeping readers out).
	if e, ok := n.extend(req.Owner, req.Mode, now.Add(req.TTL)); ok {
		return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: e.fence, TTL: req.TTL}, nil
	}
	if wait := n.refuse(req, now); wait > 0 {
		return driver.Grant{}, &driver.HeldError{Key: req.Key, RetryAfter: wait}
	}
	n.fence++
	e := entry{owner: req.Owner, fence: n.fence, expires: now.Add(req.TTL)}
	if req.Mode == driver.Write {
		n.writer = e
		delete(n.intents, req.Owner)
	} else {
		n.readers[req.Owner] = e
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: e.fence, TTL: req.TTL}, nil
}

// refuse returns how long until req may be granted (at most: a hint), or
// 0 if it may be now; a writer refused registers its intent.
func (n *rwName) refuse(req driver.RWRequest, now time.Time) time.Duration {
	var wait time.Duration
	if n.writer.owner != "" {
		wait = n.writer.expires.Sub(now)
	}
	if req.Mode == driver.Read {
		for _, exp := range n.intents {
			wait = max(wait, exp.Sub(now))
		}
		return wait
	}
	for _, e := range n.readers {
		wait = max(wait, e.expires.Sub(now))
	}
	if wait > 0 && req.Intent > 0 {
		n.intents[req.Owner] = now.Add(req.Intent)
	}
	return wait
}

// held reports whether owner holds a live lease of mode m. s.mu must be
// held.
func (n *rwName) held(owner string, m driver.RWMode) bool {
	if owner == "" {
		return false
	}
	if m == driver.Write {
		return n.writer.owner == owner
	}
	_, ok := n.readers[owner]
	return ok
}

// extend moves the expiry of owner's live lease of mode m to until and
// returns the lease; false if owner holds none. s.mu must be held.
func (n *rwName) extend(owner string, m driver.RWMode, until time.Time) (entry, bool) {
	if !n.held(owner, m) {
		return entry{}, false
	}
	if m == driver.Write {
		n.writer.expires = until
		return n.writer, true
	}
	e := n.readers[owner]
	e.expires = until
	n.readers[owner] = e
	return e, true
}

// RenewRW implements [driver.RWLocker].
func (b *Backend) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, ttl time.Duration) (time.Duration, error) {
	if err := b.usable(ctx); err != nil {
		return 0, err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	n := s.rwState(g.Key, now)
	if _, ok := n.extend(g.Owner, m, now.Add(ttl)); !ok {
		return 0, fmt.Errorf("memory: %v renew %q: %w", m, g.Key, driver.ErrNotHeld)
	}
	return ttl, nil
}

// ReleaseRW implements [driver.RWLocker]. It wakes the name's watchers
// when the name may have become free: a lease released, or the last
// intent removed while no writer holds.
func (b *Backend) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.rwState(g.Key, time.Now())
	_, intent := n.intents[g.Owner]
	delete(n.intents, g.Owner)
	if !n.held(g.Owner, m) {
		if intent && n.writer.owner == "" && len(n.intents) == 0 {
			s.wake(g.Key) // readers refused for the last intent may come in
		}
		return fmt.Errorf("memory: %v release %q: %w", m, g.Key, driver.ErrNotHeld)
	}
	if m == driver.Write {
		n.writer = entry{}
	} else {
		delete(n.readers, g.Owner)
	}
	s.wake(g.Key)
	return nil
}

var _ driver.RWInspector = (*Backend)(nil)

// InspectRW implements [driver.RWInspector]: the live writer, readers and
// intents of name, and its last fence. It changes nothing.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	s, now, err := b.lock(ctx)
	if err != nil {
		return driver.RWInfo{}, err
	}
	defer s.mu.Unlock()
	n := s.rw[name]
	if n == nil {
		return driver.RWInfo{}, nil
	}
	lease := func(e entry) driver.RWLease {
		return driver.RWLease{Holder: driver.HolderID(e.owner), Fence: e.fence, TTL: e.expires.Sub(now)}
	}
	info := driver.RWInfo{Fence: n.fence}
	if n.writer.owner != "" && now.Before(n.writer.expires) {
		w := lease(n.writer)
		info.Writer = &w
	}
	for _, e := range n.readers {
		if now.Before(e.expires) {
			info.Readers = append(info.Readers, lease(e))
		}
	}
	slices.SortFunc(info.Readers, func(a, b driver.RWLease) int { return cmp.Compare(a.Fence, b.Fence) })
	for _, exp := range n.intents {
		if now.Before(exp) {
			info.Intents++
		}
	}
	return info, nil
}
