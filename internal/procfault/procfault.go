// Package procfault is conformance.Faults for an in-process store: the way
// between a backend and its store, which the backend crosses by calling
// Send before it touches the store and Reply after. The conformance suite's
// tests (its reference store) and backend/memory's conformance run share it.
//
// It is imported by tests only; it is not part of the library's API.
package procfault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// Faults is conformance.Faults for an in-process store. The zero value has
// no faults; a nil *Faults has none either.
type Faults struct {
	mu     sync.Mutex
	refuse bool
	since  time.Time // when refuse was last turned on
	delay  time.Duration
	drop   int
}

// Refuse makes every request refused on its way to the store (on) or
// lets them through again.
func (f *Faults) Refuse(on bool) {
	f.mu.Lock()
	if on && !f.refuse {
		f.since = time.Now()
	}
	f.refuse = on
	f.mu.Unlock()
}

// Silent reports how long requests have been refused, without a break:
// how long the client has not reached the store (0 while they pass). f may
// be nil (no faults).
func (f *Faults) Silent() time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.refuse {
		return 0
	}
	return time.Since(f.since)
}

// DelayReplies delays every reply by d (0: no delay).
func (f *Faults) DelayReplies(d time.Duration) {
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
}

// DropReplies loses the replies of the next n requests the store applied.
func (f *Faults) DropReplies(n int) {
	f.mu.Lock()
	f.drop = n
	f.mu.Unlock()
}

// The errors of the injected faults: a request refused on its way
// (ErrRefused) and a reply lost after the store applied the request
// (ErrReset).
var (
	ErrRefused = errors.New("procfault: connection refused (injected fault)")
	ErrReset   = errors.New("procfault: connection reset by peer (injected fault)")
)

// Send is a request's way to the store: refused, or through. f may be nil
// (no faults).
func (f *Faults) Send() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return ErrRefused
	}
	return nil
}

// Reply is the way back of the reply to a request the store applied:
// lost, late (until ctx ends, unless ignoreCtx), or through.
func (f *Faults) Reply(ctx context.Context, ignoreCtx bool) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	if f.drop > 0 {
		f.drop--
		f.mu.Unlock()
		return ErrReset
	}
	d := f.delay
	f.mu.Unlock()
	if d <= 0 {
		return nil
	}
	if ignoreCtx {
		time.Sleep(d)
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		// After a stall of the process both may be ready, and select
		// picks either: the reply, d after the request, came after a
		// context that is already done (seen: a reply 1.125s late for a
		// context of 125ms reported as on time).
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backend puts Faults between a backend of an in-process store
// (backend/memory) and its caller, classifying the faults as a network
// backend should: transient errors, the context's error when it ends.
type Backend struct {
	driver.Backend
	F *Faults
}

// Acquire is the backend's Acquire through the faults.
func (b Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.F.Send(); err != nil {
		return driver.Grant{}, fmt.Errorf("faulty: acquire %q: %w", req.Key, err)
	}
	g, err := b.Backend.Acquire(ctx, req)
	if rerr := b.F.Reply(ctx, false); rerr != nil {
		return driver.Grant{}, fmt.Errorf("faulty: acquire %q: %w", req.Key, rerr)
	}
	return g, err
}

// Renew is the backend's Renew through the faults.
func (b Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.F.Send(); err != nil {
		return 0, fmt.Errorf("faulty: renew %q: %w", g.Key, err)
	}
	d, err := b.Backend.Renew(ctx, g, ttl)
	if rerr := b.F.Reply(ctx, false); rerr != nil {
		return 0, fmt.Errorf("faulty: renew %q: %w", g.Key, rerr)
	}
	return d, err
}

// Release is the backend's Release through the faults.
func (b Backend) Release(ctx context.Context, g driver.Grant) error {
	if err := b.F.Send(); err != nil {
		return fmt.Errorf("faulty: release %q: %w", g.Key, err)
	}
	err := b.Backend.Release(ctx, g)
	if rerr := b.F.Reply(ctx, false); rerr != nil {
		return fmt.Errorf("faulty: release %q: %w", g.Key, rerr)
	}
	return err
}
