//go:build unix

// run --read / --write: COMMAND holds a read (shared) or the write
// (exclusive) lease of the read-write lock KEY (package rwlock) instead of
// the lock KEY. The lease is a fencedlock.Lease, so everything run does
// with it (renewal, the supervisor's kill switch, the release once the
// tree is gone) is the same.

package main

import (
	"context"
	"errors"
	"flag"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// rwFlags are run's --read and --write.
type rwFlags struct {
	read, write bool
}

// addRWFlags defines --read and --write on fs.
func addRWFlags(fs *flag.FlagSet, f *rwFlags) {
	fs.BoolVar(&f.read, "read", false, "hold a read (shared) lease of the read-write lock KEY: many --read runs at once, none with a --write run (see docs/rwlock.md)")
	fs.BoolVar(&f.write, "write", false, "hold the write (exclusive) lease of the read-write lock KEY: waits for --read and --write runs of KEY, and new --read runs wait for it. Not the lock KEY of a run without --read/--write")
}

// mode returns the mode of the flags, 0 for the plain lock.
func (f rwFlags) mode() rwlock.Mode {
	switch {
	case f.read:
		return rwlock.Read
	case f.write:
		return rwlock.Write
	}
	return 0
}

// check refuses --read with --write, and either with --limit.
func (f rwFlags) check(limit int) error {
	if f.read && f.write {
		return errors.New("--read and --write exclude each other")
	}
	if f.mode() != 0 && limit != 1 {
		return errors.New("--read and --write take no --limit")
	}
	return nil
}

// rwTaker takes a lease of one mode of read-write locks.
type rwTaker struct {
	rw   *rwlock.RWLock
	mode rwlock.Mode
}

// TryAcquire makes one attempt at the lease of name.
func (t *rwTaker) TryAcquire(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	take := t.rw.TryLock
	if t.mode == rwlock.Read {
		take = t.rw.TryRLock
	}
	return leaseOf(take(ctx, name, opts...))
}

// Acquire waits for the lease of name.
func (t *rwTaker) Acquire(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	take := t.rw.Lock
	if t.mode == rwlock.Read {
		take = t.rw.RLock
	}
	return leaseOf(take(ctx, name, opts...))
}

func leaseOf(l *rwlock.Lease, err error) (*fencedlock.Lease, error) {
	if err != nil {
		return nil, err
	}
	return l.Lease, nil
}

// newRWTaker returns run's taker of read-write leases on b, and the
// function that closes it.
func newRWTaker(b driver.Backend, f *runFlags) (taker, func(), error) {
	rw, err := rwlock.New(b, fencedlock.Options{TTL: f.ttl})
	if err != nil {
		return nil, nil, err
	}
	return &rwTaker{rw: rw, mode: f.rw.mode()}, func() { _ = rw.Close() }, nil
}

// noInspect hides a backend's Inspector: Inspect reads the lock KEY, which
// says nothing of the read-write lock KEY, so run's messages about a
// --read or --write wait do not name a holder.
type noInspect struct{ driver.Backend }

// messagesBackend returns the backend run's progress messages inspect.
func (f rwFlags) messagesBackend(b driver.Backend) driver.Backend {
	if f.mode() != 0 {
		return noInspect{b}
	}
	return b
}
