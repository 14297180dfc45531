package chaos

import (
	"context"
	mrand "math/rand/v2"
	"strconv"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/multilock"
)

// ModeMulti: a set of keys (package multilock): LockKey and a random
// subset of multiPool other keys, taken at once on one lease. The set's
// first key is LockKey (the others sort after it), so the lease's Fence
// is LockKey's: every set contends on LockKey and the checker checks its
// history as a lock's, while the extra keys make the sets differ in size
// and overlap. The nemesis's deletion of LockKey's lock ends a set's
// lease through one of its keys. With Split, odd workers take their sets
// around another first key (the negative control: disjoint sets, one
// register).
const ModeMulti = "multi"

// multiPool is how many extra keys a set may take some of.
const multiPool = 6

// multiKey is the extra key i of the set workload on lockKey: it sorts
// after lockKey.
func multiKey(lockKey string, i int) string { return lockKey + "/m/" + strconv.Itoa(i) }

// newMultiAcquirer makes the acquirer of ModeMulti on b.
func newMultiAcquirer(cfg WorkerConfig, b driver.Backend) (acquirer, func() error, error) {
	m, err := multilock.New(b, fencedlock.Options{TTL: cfg.TTL})
	if err != nil {
		return nil, nil, err
	}
	first := cfg.LockKey
	if cfg.Split && cfg.ID%2 == 1 {
		first += "/split" // sorts before its own extra keys too
	}
	rnd := mrand.New(mrand.NewPCG(uint64(cfg.ID), 0x6d756c7469))
	return func(ctx context.Context) (*fencedlock.Lease, int, error) {
		keys := []string{first}
		for i := range multiPool {
			if rnd.IntN(3) == 0 {
				keys = append(keys, multiKey(first, i))
			}
		}
		ls, err := m.Acquire(ctx, keys)
		if err != nil {
			return nil, 0, err
		}
		return ls.Lease(), 0, nil // Fence: the first key's (first)
	}, m.Close, nil
}
