package closeonce

import (
	"sync"
	"testing"
)

// TestTake: the first Take marks the value closed and hands over what was
// pending, leaving nothing behind; a second finds it closed and takes
// nothing.
func TestTake(t *testing.T) {
	var (
		mu      sync.Mutex
		closed  bool
		pending = map[int]func(){1: func() {}, 2: func() {}}
	)
	got, first := Take(&mu, &closed, &pending)
	if !first || !closed || len(got) != 2 || pending != nil {
		t.Fatalf("first Take: %d taken, first %v, closed %v, left %v", len(got), first, closed, pending)
	}
	pending = map[int]func(){3: func() {}} // registered by mistake after Close
	if got, first := Take(&mu, &closed, &pending); first || got != nil || len(pending) != 1 {
		t.Fatalf("second Take: %d taken, first %v, left %d", len(got), first, len(pending))
	}
}
