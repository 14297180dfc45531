//go:build unix

// run KEY1 KEY2 ... -- COMMAND: COMMAND holds every key at once (package
// multilock: one step on the server, one lease for the set). The set's
// lease is a fencedlock.Lease (multilock.Lease.Lease), so everything run
// does with a lease (renewal, the supervisor's kill switch, the release
// once the tree is gone) is the same.

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/multilock"
)

// splitKeys splits run's arguments after the flags into the KEYs and the
// rest, which starts with "--" when KEYs were followed by it: every
// argument before the first "--" is a KEY, unless one looks like a flag,
// or there is no "--" (then only the first is, and parseRun reports the
// rest as it did for one KEY).
func splitKeys(args []string) (keys, rest []string) {
	i := slices.Index(args, "--")
	if i < 1 || slices.ContainsFunc(args[1:i], func(a string) bool { return len(a) > 1 && a[0] == '-' }) {
		return args[:1], args[1:]
	}
	return args[:i], args[i:]
}

// validateSet checks the KEYs of a set (sorted, distinct, at most
// multilock.MaxKeys) and that no --limit goes with them.
func validateSet(keys []string, limit int) error {
	if limit != 1 {
		return fmt.Errorf("--limit takes one KEY, not %d", len(keys))
	}
	_, err := multilock.Normalize(keys)
	return err
}

// sets takes the set of KEYs (multilock): the key run passes is the
// keys joined for messages, and is ignored.
type sets struct {
	m    *multilock.Locker
	keys []string
	last *multilock.Lease // the set taken last, for commandVars
}

// TryAcquire makes one attempt to take every key at once.
func (s *sets) TryAcquire(ctx context.Context, _ string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	return s.took(s.m.TryAcquire(ctx, s.keys, opts...))
}

// Acquire waits until every key is taken at once.
func (s *sets) Acquire(ctx context.Context, _ string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	return s.took(s.m.Acquire(ctx, s.keys, opts...))
}

func (s *sets) took(ls *multilock.Lease, err error) (*fencedlock.Lease, error) {
	if err != nil {
		return nil, err
	}
	s.last = ls
	return ls.Lease(), nil
}

// setVars returns the variable of COMMAND holding the set: KEY=FENCE of
// each key, one a line, the keys sorted (FENCEDLOCK_FENCES; the fence
// follows the last '='). There is no FENCEDLOCK_KEY nor _FENCE: each key
// has its own fence.
func (s *sets) setVars() []string {
	keys, fences := s.last.Keys(), s.last.Fences()
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + fences[i].String()
	}
	return []string{"FENCEDLOCK_FENCES=" + strings.Join(pairs, "\n")}
}
