package chaos

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/semaphore"
)

// Workloads: what a worker's lease is. Every one runs the same round
// (acquire, claim, read, write+1, release) and sends the same events, so
// one checker serves all three.
const (
	// ModeLock: the lease of the lock LockKey (Locker.Acquire).
	ModeLock = ""
	// ModeSemaphore: a permit of the semaphore LockKey with Limit permits
	// (semaphore.Acquire); the worker writes the register of its
	// permit's slot ([SlotRegKey]) with the permit's fence, and its events
	// carry the slot.
	ModeSemaphore = "semaphore"
	// ModeElection: a term of the election LockKey (election.Campaign);
	// releasing is resigning.
	ModeElection = "election"
)

// SlotRegKey is the key of slot's register in the semaphore workload:
// each slot has its own register, as a resource partitioned by slot would,
// since a permit's fence increases per slot only.
func SlotRegKey(regKey string, slot int) string { return regKey + "/slot/" + strconv.Itoa(slot) }

// acquirer takes one lease of the worker's workload: the lease, its slot
// (0 but in ModeSemaphore) and an error.
type acquirer func(ctx context.Context) (*fencedlock.Lease, int, error)

// newAcquirer makes the acquirer of cfg.Mode on b and its closer.
func newAcquirer(cfg WorkerConfig, b driver.Backend) (acquirer, func() error, error) {
	opts := fencedlock.Options{TTL: cfg.TTL}
	switch cfg.Mode {
	case ModeLock:
		l, err := fencedlock.New(b, opts)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (*fencedlock.Lease, int, error) {
			ls, err := l.Acquire(ctx, cfg.LockKey)
			return ls, 0, err
		}, l.Close, nil
	case ModeSemaphore:
		s, err := semaphore.New(b, opts)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (*fencedlock.Lease, int, error) {
			p, err := s.Acquire(ctx, cfg.LockKey, cfg.Limit)
			if err != nil {
				return nil, 0, err
			}
			return p.Lease, p.Slot(), nil
		}, s.Close, nil
	case ModeRW, ModeRWBroken:
		return newRWAcquirer(cfg, b)
	case ModeMulti:
		return newMultiAcquirer(cfg, b) // workload_multi.go
	case ModeElection:
		e, err := election.New(b, opts)
		if err != nil {
			return nil, nil, err
		}
		name := cfg.LockKey
		if cfg.Split {
			name += "/split-" + strconv.Itoa(cfg.ID%2) // the negative control: two elections, one register
		}
		value := []byte("worker " + strconv.Itoa(cfg.ID))
		return func(ctx context.Context) (*fencedlock.Lease, int, error) {
			t, err := e.Campaign(ctx, name, value)
			if err != nil {
				return nil, 0, err
			}
			return t.Lease, 0, nil // Term.Resign is Lease.Release
		}, e.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown workload %q", cfg.Mode)
}

// keyed is a register that can make the same register on another key
// (the semaphore workload's per-slot registers).
type keyed interface {
	withKey(key string) register
}

func (r *redisRegister) withKey(key string) register {
	c := *r
	c.key = key
	return &c
}

func (r *sqlRegister) withKey(key string) register {
	c := *r
	c.key = key
	return &c
}

func (r *etcdRegister) withKey(key string) register {
	c := *r
	c.key = key
	return &c
}

// regFor returns the register the worker writes under a lease of slot:
// its register, or in ModeSemaphore the slot's (made once).
func (w *worker) regFor(slot int) (register, error) {
	if w.cfg.Mode != ModeSemaphore {
		return w.reg, nil
	}
	if r, ok := w.slots[slot]; ok {
		return r, nil
	}
	k, ok := w.reg.(keyed)
	if !ok {
		return nil, fmt.Errorf("chaos: register %T has no per-slot keys", w.reg)
	}
	r := k.withKey(SlotRegKey(w.cfg.RegKey, slot))
	w.slots[slot] = r
	return r, nil
}
