package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/feed"
)

// term is the leader's value of key's term with fence: reported only while
// the lock entry carrying that fence is live.
type term struct {
	fence fencing.Token
	value []byte
}

// maxQueued bounds a slow watcher's backlog: past it the backlog collapses
// to the current state, marked Missed.
const maxQueued = 64

// leaderWatch is one WatchLeader: the events not yet delivered, under the
// Store's mu, and a wake-up for its goroutine.
type leaderWatch struct {
	queue  []driver.LeaderEvent
	last   driver.LeaderInfo // the state queued last
	wake   chan struct{}     // buffer of one
	missed bool
}

// Proclaim implements [driver.Elector].
func (b *Backend) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	s, now, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	e, ok := s.live(key, now)
	if !ok || e.fence != fence || driver.HolderID(e.owner) != holder {
		return fmt.Errorf("memory: proclaim %q: %w", key, driver.ErrNotHeld)
	}
	s.terms[key] = term{fence: fence, value: slices.Clone(value)}
	s.leaderChanged(key, now)
	return nil
}

// Leader implements [driver.Elector].
func (b *Backend) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	s, now, err := b.lock(ctx)
	if err != nil {
		return driver.LeaderInfo{}, err
	}
	defer s.mu.Unlock()
	s.live(key, now)
	return s.leader(key, now), nil
}

// leader returns key's current term. s.mu must be held, and an expired
// entry of key already deleted (see live).
func (s *Store) leader(key string, now time.Time) driver.LeaderInfo {
	e, ok := s.locks[key]
	t, proclaimed := s.terms[key]
	if !ok || !proclaimed || t.fence != e.fence {
		return driver.LeaderInfo{}
	}
	return driver.LeaderInfo{Held: true, Fence: e.fence, Holder: driver.HolderID(e.owner), Value: slices.Clone(t.value), TTL: e.expires.Sub(now)}
}

// leaderChanged queues key's state for its watchers whose last queued
// state differs. s.mu must be held.
func (s *Store) leaderChanged(key string, now time.Time) {
	ws := s.leaderWs[key]
	if len(ws) == 0 {
		return
	}
	cur := s.leader(key, now)
	for w := range ws {
		if w.last.Held == cur.Held && w.last.Fence == cur.Fence {
			continue
		}
		w.last = cur
		if len(w.queue) >= maxQueued {
			w.queue, w.missed = w.queue[:0], true
		}
		w.queue = append(w.queue, driver.LeaderEvent{LeaderInfo: cur, Missed: w.missed})
		w.missed = false
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// WatchLeader implements [driver.Elector]. Each watch has a goroutine that
// delivers its queue and wakes at the current term's expiry (the Store
// expires entries lazily, when it looks at them).
func (b *Backend) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	if err := b.usable(ctx); err != nil {
		return nil, nil, err
	}
	s := b.s
	w := &leaderWatch{wake: make(chan struct{}, 1)}
	s.mu.Lock()
	now := time.Now()
	s.live(key, now)
	w.last = s.leader(key, now)
	w.queue = []driver.LeaderEvent{{LeaderInfo: w.last}}
	if s.leaderWs[key] == nil {
		s.leaderWs[key] = make(map[*leaderWatch]struct{})
	}
	s.leaderWs[key][w] = struct{}{}
	s.mu.Unlock()

	out, stop := feed.Start(ctx, func(ctx context.Context, out chan<- driver.LeaderEvent) {
		s.deliver(ctx, key, w, out)
	})
	return out, b.addStop(stop), nil
}

// deliver runs one watch until ctx ends, then unregisters it.
func (s *Store) deliver(ctx context.Context, key string, w *leaderWatch, out chan<- driver.LeaderEvent) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() {
		s.mu.Lock()
		delete(s.leaderWs[key], w)
		if len(s.leaderWs[key]) == 0 {
			delete(s.leaderWs, key)
		}
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		now := time.Now()
		e, held := s.live(key, now) // queues the expiry of the term, if due
		q := w.queue
		w.queue = nil
		s.mu.Unlock()
		for _, ev := range q {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
		wait := time.Hour
		if held {
			wait = e.expires.Sub(now) // a renewal moves it: the timer then finds the entry live and waits again
		}
		timer.Reset(wait)
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// addStop registers end, which ends a watch, for Close, and returns the
// watch's stop: end, once, whether Close or the watcher calls it first.
func (b *Backend) addStop(end func()) func() {
	var once sync.Once
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id := b.nextID
	stop := func() {
		once.Do(func() {
			end()
			b.mu.Lock()
			delete(b.stops, id)
			b.mu.Unlock()
		})
	}
	if b.stops == nil {
		b.stops = make(map[uint64]func())
	}
	b.stops[id] = stop
	return stop
}
