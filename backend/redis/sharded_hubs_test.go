package redis

import (
	"errors"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
)

// TestMaxShardedConnsOption: the default and the range of MaxShardedConns.
func TestMaxShardedConnsOption(t *testing.T) {
	b, _, c := newMini(t)
	if got := b.Options().MaxShardedConns; got != DefaultMaxShardedConns {
		t.Fatalf("default MaxShardedConns %d", got)
	}
	for _, n := range []int{-1, 16385} {
		if _, err := New(c, Options{ShardedPubSub: true, MaxShardedConns: n}); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("MaxShardedConns %d: %v, want ErrInvalid", n, err)
		}
	}
}
