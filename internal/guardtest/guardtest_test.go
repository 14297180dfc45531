package guardtest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
)

// TestMixedTokensOnGuard runs the writers against an in-process
// fencing.Guard and checks what MixedTokens promises: every token from 1
// to writers*perWriter written once, by the writer it names, the counts
// matching the Guard's own outcomes, and both outcomes occurring.
func TestMixedTokensOnGuard(t *testing.T) {
	const writers, perWriter = 8, 25
	var g fencing.Guard
	var mu sync.Mutex
	seen := make(map[fencing.Token]string)
	made := 0
	accepted, rejected := MixedTokens(t, writers, perWriter, func(w int) Write {
		made++
		return func(tok fencing.Token, holder string) error {
			mu.Lock()
			if prev, dup := seen[tok]; dup {
				t.Errorf("token %d written by %s and %s", tok, prev, holder)
			}
			seen[tok] = holder
			mu.Unlock()
			if holder != fmt.Sprintf("w%d", w) {
				t.Errorf("writer %d wrote as holder %q", w, holder)
			}
			return g.Do(tok, holder, nil)
		}
	})
	if made != writers {
		t.Fatalf("newWriter called %d times, want %d", made, writers)
	}
	if len(seen) != writers*perWriter {
		t.Fatalf("%d distinct tokens written, want %d", len(seen), writers*perWriter)
	}
	for tok := fencing.Token(1); tok <= writers*perWriter; tok++ {
		if _, ok := seen[tok]; !ok {
			t.Fatalf("token %d never written", tok)
		}
	}
	if accepted+rejected != writers*perWriter || accepted == 0 || rejected == 0 {
		t.Fatalf("accepted %d rejected %d of %d", accepted, rejected, writers*perWriter)
	}
	if tok, holder := g.Accepted(); tok != writers*perWriter || holder != seen[tok] {
		t.Fatalf("guard ends at %d from %q, want %d from %q", tok, holder, writers*perWriter, seen[writers*perWriter])
	}
	t.Logf("%d writes: %d accepted, %d rejected", writers*perWriter, accepted, rejected)
}
