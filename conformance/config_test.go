package conformance

import (
	"strings"
	"testing"
	"time"
)

// TestConfigResolve: zero fields take their defaults (QueuePlaceTTL stays
// 0: the waiter's TTL alone), and a negative duration, QueuePlaceTTL's
// included, is refused before any property runs.
func TestConfigResolve(t *testing.T) {
	c, err := Config{}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.MinTTL != DefaultMinTTL || c.ExpirySlack != DefaultExpirySlack || c.QueueDelay != DefaultQueueDelay || c.QueuePlaceTTL != 0 {
		t.Errorf("Config{} resolved to %+v", c)
	}
	for _, bad := range []Config{
		{ExpirySlack: -time.Millisecond},
		{QueueDelay: -time.Millisecond},
		{QueuePlaceTTL: -time.Millisecond},
		{Timeout: -time.Millisecond},
		{MinTTL: time.Nanosecond},
	} {
		if _, err := bad.resolve(); err == nil {
			t.Errorf("%+v resolved without an error", bad)
		}
	}
}

// TestStacksAfter: the dump is taken once its time has passed (and shows
// the goroutine that waits), and not at all when the call came back first.
func TestStacksAfter(t *testing.T) {
	stop := stacksAfter(time.Hour)
	if got := stop(); got != "" {
		t.Fatalf("dump taken before its time: %q", got)
	}
	stop = stacksAfter(time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if got := stop(); !strings.Contains(got, "TestStacksAfter") {
		t.Fatalf("dump after its time does not show this test's goroutine:\n%s", got)
	}
}
