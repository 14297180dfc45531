package multilocktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
)

// ledger records who holds each key and its last fence, and the first
// violation seen.
type ledger struct {
	mu      sync.Mutex
	holder  map[string]int           // key -> worker holding it
	last    map[string]fencing.Token // key -> last fence granted
	grants  [2]int                   // sets, single keys
	failure error
}

// fail records err if it is the first failure.
func (l *ledger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil {
		l.failure = err
	}
}

// take records worker w's grant of keys with fences.
func (l *ledger) take(w int, keys []string, fences []fencing.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, k := range keys {
		if h, ok := l.holder[k]; ok && l.failure == nil {
			l.failure = fmt.Errorf("worker %d granted %q while worker %d holds it", w, k, h)
		}
		if fences[i] <= l.last[k] && l.failure == nil {
			l.failure = fmt.Errorf("worker %d granted %q with fence %d, not above %d", w, k, fences[i], l.last[k])
		}
		l.holder[k], l.last[k] = w, fences[i]
	}
	if len(keys) > 1 {
		l.grants[0]++
	} else {
		l.grants[1]++
	}
}

// give records the end of a grant of keys (before its release).
func (l *ledger) give(keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.holder, k)
	}
}

// hold records a grant of keys, holds it 1ms, and releases it.
func (l *ledger) hold(w int, keys []string, fences []fencing.Token, release func(context.Context) error) {
	l.take(w, keys, fences)
	time.Sleep(time.Millisecond)
	l.give(keys)
	release(context.Background())
}

// MixedContention: workers on clients of their own take random sets of a
// few keys (multilock) and single keys (fencedlock) on the same keys, for
// a bounded time: no key is ever held by two leases at once, and each
// key's fences increase across both kinds of lease.
func MixedContention(t *testing.T, s Setup) {
	ks := keys(t, 5)
	l := &ledger{holder: map[string]int{}, last: map[string]fencing.Token{}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		m, single := newLocker(t, s.New(t)), newSingle(t, s.New(t))
		wg.Go(func() {
			for i := 0; i < 1000 && ctx.Err() == nil; i++ {
				if rand.N(2) == 0 {
					k := ks[rand.N(len(ks))]
					if ls, err := single.Acquire(ctx, k); err == nil {
						l.hold(w, []string{k}, []fencing.Token{ls.Fence()}, ls.Release)
					} else if !errors.Is(err, fencedlock.ErrNotAcquired) {
						l.fail(err)
					}
					continue
				}
				if ls, err := m.Acquire(ctx, randomSet(ks)); err == nil {
					l.hold(w, ls.Keys(), ls.Fences(), ls.Release)
				} else if !errors.Is(err, fencedlock.ErrNotAcquired) {
					l.fail(err)
				}
			}
		})
	}
	wg.Wait()
	if l.failure != nil {
		t.Fatal(l.failure)
	}
	t.Logf("%d sets and %d single keys granted", l.grants[0], l.grants[1])
	if l.grants[0] == 0 || l.grants[1] == 0 {
		t.Errorf("no contention tested: %d sets, %d single keys granted", l.grants[0], l.grants[1])
	}
}

// randomSet returns a random subset of ks of 2 keys or more.
func randomSet(ks []string) []string {
	set := []string{}
	for _, k := range ks {
		if rand.N(2) == 0 {
			set = append(set, k)
		}
	}
	if len(set) < 2 {
		return ks[:2]
	}
	return set
}
