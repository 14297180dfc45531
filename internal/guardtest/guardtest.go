// Package guardtest drives a fenced store with many concurrent writers
// presenting fencing tokens in mixed order, for the tests of the stores
// that guard writes with [fencing.Token]s (the Redis hash and the SQL
// table). The store's test checks the end state; this package only makes
// the writes and counts their outcomes.
package guardtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
)

// Write makes one guarded write with token tok on behalf of holder. It
// returns nil if the store accepted the write and an error wrapping
// [fencing.ErrStale] if it refused it.
type Write func(tok fencing.Token, holder string) error

// MixedTokens starts writers goroutines, each writing perWriter times
// through the Write that newWriter returns for it (newWriter runs on the
// test's goroutine, one writer after the other, so it may call t.Fatal).
// Writer w's holder id is "w<w>". Every token from 1 to
// writers*perWriter is written exactly once (writer w writes the tokens
// congruent to 1+7w modulo writers, so writers must not be a multiple of
// 7); each writer's tokens wrap around, so some of its writes are older
// than one already accepted. MixedTokens waits for
// all writes and returns how many were accepted and how many refused as
// stale; any other error fails the test (t.Error).
func MixedTokens(t *testing.T, writers, perWriter int, newWriter func(w int) Write) (accepted, rejected int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := 0; w < writers; w++ {
		write := newWriter(w)
		holder := fmt.Sprintf("w%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				tok := fencing.Token(1 + (i*writers+w*7)%(writers*perWriter)) // mixed order
				err := write(tok, holder)
				mu.Lock()
				switch {
				case err == nil:
					accepted++
				case errors.Is(err, fencing.ErrStale):
					rejected++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return accepted, rejected
}
