package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// procFaults is conformance.Faults for an in-process store: the way
// between a backend and its store, which the backend crosses by calling
// send before it touches the store and reply after.
type procFaults struct {
	mu     sync.Mutex
	refuse bool
	delay  time.Duration
	drop   int
}

func (f *procFaults) Refuse(on bool) {
	f.mu.Lock()
	f.refuse = on
	f.mu.Unlock()
}

func (f *procFaults) DelayReplies(d time.Duration) {
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
}

func (f *procFaults) DropReplies(n int) {
	f.mu.Lock()
	f.drop = n
	f.mu.Unlock()
}

var (
	errRefused = errors.New("connection refused (injected fault)")
	errReset   = errors.New("connection reset by peer (injected fault)")
)

// send is a request's way to the store: refused, or through. f may be nil
// (no faults).
func (f *procFaults) send() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return errRefused
	}
	return nil
}

// reply is the way back of the reply to a request the store applied:
// lost, late (until ctx ends, unless ignoreCtx), or through.
func (f *procFaults) reply(ctx context.Context, ignoreCtx bool) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	if f.drop > 0 {
		f.drop--
		f.mu.Unlock()
		return errReset
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
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// faultyBackend puts procFaults between a backend of an in-process store
// (backend/memory) and its caller, classifying the faults as a network
// backend should: transient errors, the context's error when it ends.
type faultyBackend struct {
	driver.Backend
	f *procFaults
}

func (b faultyBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.f.send(); err != nil {
		return driver.Grant{}, fmt.Errorf("faulty: acquire %q: %w", req.Key, err)
	}
	g, err := b.Backend.Acquire(ctx, req)
	if rerr := b.f.reply(ctx, false); rerr != nil {
		return driver.Grant{}, fmt.Errorf("faulty: acquire %q: %w", req.Key, rerr)
	}
	return g, err
}

func (b faultyBackend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if err := b.f.send(); err != nil {
		return 0, fmt.Errorf("faulty: renew %q: %w", g.Key, err)
	}
	d, err := b.Backend.Renew(ctx, g, ttl)
	if rerr := b.f.reply(ctx, false); rerr != nil {
		return 0, fmt.Errorf("faulty: renew %q: %w", g.Key, rerr)
	}
	return d, err
}

func (b faultyBackend) Release(ctx context.Context, g driver.Grant) error {
	if err := b.f.send(); err != nil {
		return fmt.Errorf("faulty: release %q: %w", g.Key, err)
	}
	err := b.Backend.Release(ctx, g)
	if rerr := b.f.reply(ctx, false); rerr != nil {
		return fmt.Errorf("faulty: release %q: %w", g.Key, rerr)
	}
	return err
}
