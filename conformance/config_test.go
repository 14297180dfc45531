package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/schedlag"
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

// TestTimeBudget: fits refuses a timed run that would outlast the
// property's deadline, and budgetLeft reads the same time left; without a
// deadline both always allow.
func TestTimeBudget(t *testing.T) {
	lag := schedlag.Start()
	defer lag.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	e := &env{ctx: ctx, cfg: Config{Timeout: 10 * time.Second, ExpirySlack: 100 * time.Millisecond}, ttl: 250 * time.Millisecond, lag: lag}
	if _, _, ok := e.fits(500 * time.Millisecond); !ok {
		t.Error("a run of about 3s does not fit in 10s")
	}
	if span, left, ok := e.fits(3 * time.Second); ok || span <= left {
		t.Errorf("a run of about %v fits in the %v left", span, left)
	}
	if !e.budgetLeft(1, 2) || e.budgetLeft(1, 1) {
		t.Errorf("budgetLeft with %v of 10s left: (1/2) %v, (1/1) %v", e.timeLeft(), e.budgetLeft(1, 2), e.budgetLeft(1, 1))
	}
	e.ctx = context.WithoutCancel(t.Context()) // no deadline, whatever go test's -timeout
	if _, _, ok := e.fits(fencedlock.MaxTTL); !ok || !e.budgetLeft(1, 1) {
		t.Error("without a deadline a run was refused")
	}
}
