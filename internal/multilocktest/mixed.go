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

// MixedContention: workers on clients of their own take random sets of a
// few keys (multilock) and single keys (fencedlock) on the same keys, for
// a bounded time: no key is ever held by two leases at once, and each
// key's fences increase across both kinds of lease.
func MixedContention(t *testing.T, s Setup) {
	ks := keys(t, 5)
	var (
		mu      sync.Mutex
		holder  = map[string]int{}           // key -> worker holding it
		last    = map[string]fencing.Token{} // key -> last fence granted
		grants  [2]int                       // sets, singles
		failure error
	)
	fail := func(err error) {
		if failure == nil {
			failure = err
		}
	}
	// take records worker w's grant of keys with fences; give ends it.
	take := func(w int, keys []string, fences []fencing.Token) {
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			if h, ok := holder[k]; ok {
				fail(errorf("worker %d granted %q while worker %d holds it", w, k, h))
			}
			if fences[i] <= last[k] {
				fail(errorf("worker %d granted %q with fence %d, not above %d", w, k, fences[i], last[k]))
			}
			holder[k], last[k] = w, fences[i]
		}
		grants[min(len(keys)-1, 1)^1]++
	}
	give := func(keys []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			delete(holder, k)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		m, single := newLocker(t, s.New(t)), newSingle(t, s.New(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000 && ctx.Err() == nil; i++ {
				if rand.N(2) == 0 {
					k := ks[rand.N(len(ks))]
					ls, err := single.Acquire(ctx, k)
					if err != nil {
						if !errors.Is(err, fencedlock.ErrNotAcquired) {
							mu.Lock()
							fail(err)
							mu.Unlock()
						}
						continue
					}
					take(w, []string{k}, []fencing.Token{ls.Fence()})
					time.Sleep(time.Millisecond)
					give([]string{k})
					ls.Release(context.Background())
					continue
				}
				set := []string{}
				for _, k := range ks {
					if rand.N(2) == 0 {
						set = append(set, k)
					}
				}
				if len(set) < 2 {
					set = ks[:2]
				}
				ls, err := m.Acquire(ctx, set)
				if err != nil {
					if !errors.Is(err, fencedlock.ErrNotAcquired) {
						mu.Lock()
						fail(err)
						mu.Unlock()
					}
					continue
				}
				take(w, ls.Keys(), ls.Fences())
				time.Sleep(time.Millisecond)
				give(ls.Keys())
				ls.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	t.Logf("%d sets and %d single keys granted", grants[0], grants[1])
	if grants[0] == 0 || grants[1] == 0 {
		t.Errorf("no contention tested: %d sets, %d single keys granted", grants[0], grants[1])
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
