package chaos

import (
	"context"
	"math/rand/v2"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// The read-write workload: each round a worker takes a read lease (three
// rounds in four) or the write lease of the read-write lock LockKey
// (package rwlock). A writer's round is the lock's (claim, read, write+1);
// a reader only reads the register. Its acquire event is marked Read, and
// the checker's (b) allows read leases to overlap each other, never a
// write lease.
const (
	// ModeRW is the read-write workload.
	ModeRW = "rw"
	// ModeRWBroken is its negative control: every lease is a read lease,
	// but one round in four is recorded (and writes) as a writer's.
	ModeRWBroken = "rw-broken"
)

// rwReadSlot is the slot the rw workload's acquirer returns for a read
// lease (the worker then records it Read, slot 0).
const rwReadSlot = 1

// newRWAcquirer makes the acquirer of the rw workloads on b and its
// closer.
func newRWAcquirer(cfg WorkerConfig, b driver.Backend) (acquirer, func() error, error) {
	rw, err := rwlock.New(b, fencedlock.Options{TTL: cfg.TTL})
	if err != nil {
		return nil, nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID)+1<<32))
	return func(ctx context.Context) (*fencedlock.Lease, int, error) {
		read := rng.IntN(4) != 0
		take := rw.Lock
		if read || cfg.Mode == ModeRWBroken {
			take = rw.RLock
		}
		l, err := take(ctx, cfg.LockKey)
		if err != nil {
			return nil, 0, err
		}
		if read {
			return l.Lease, rwReadSlot, nil
		}
		return l.Lease, 0, nil
	}, rw.Close, nil
}
