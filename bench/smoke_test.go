package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs every contender once through every scenario, scaled down,
// so that `go test ./...` (CI) proves the benchmarks work against real
// servers without spending benchmark time. It checks correctness only:
// no speed is asserted.
func TestSmoke(t *testing.T) {
	e := servers(t)
	for _, c := range allContenders() {
		t.Run(c.name, func(t *testing.T) {
			// anomaly fails the test for fencedlock and the baseline; a
			// competitor's anomalies are findings the benchmarks report.
			anomaly := t.Errorf
			if !ours(c) {
				anomaly = t.Logf
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			t.Run("AcquireRelease", func(t *testing.T) {
				cl := c.open(t, e, clientConfig{ttl: benchTTL})
				defer cl.close()
				k := key("smoke-ar", c.name, 0)
				for range 3 {
					h, err := cl.acquire(ctx, k)
					if err != nil {
						t.Fatalf("acquire: %v", err)
					}
					if err := h.Release(ctx); err != nil {
						t.Fatalf("release: %v", err)
					}
				}
			})

			t.Run("Renew", func(t *testing.T) {
				cl := c.open(t, e, clientConfig{ttl: benchTTL, manual: true})
				defer cl.close()
				h, err := cl.acquire(ctx, key("smoke-renew", c.name, 0))
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
				err = h.Renew(ctx)
				switch {
				case !c.manualRenew && !errors.Is(err, errNoRenew):
					t.Errorf("renew of a library without manual renew: got %v, want errNoRenew", err)
				case c.manualRenew && err != nil:
					t.Errorf("renew: %v", err)
				}
				if err := h.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
			})

			t.Run("Contended", func(t *testing.T) {
				r := runContended(t, e, c, 4, 300*time.Millisecond)
				if r.violations != 0 {
					anomaly("%d times two workers held the lock at once", r.violations)
				}
				if r.errors != 0 {
					anomaly("%d errors; first: %v", r.errors, r.firstErr)
				}
				if r.acquisitions == 0 {
					anomaly("no acquisition in 300ms")
				}
				var sum int64
				for _, v := range r.perWorker {
					sum += v
				}
				if sum != r.acquisitions || r.handoffs > r.acquisitions || r.wait.n != uint64(r.acquisitions) {
					t.Errorf("inconsistent counts: %d acquisitions, %d per worker, %d hand-offs, %d waits", r.acquisitions, sum, r.handoffs, r.wait.n)
				}
				t.Logf("%d acquisitions, %d hand-offs, wait p99 %v, commands %d (%s)", r.acquisitions, r.handoffs, r.wait.quantile(0.99), r.commands, r.detail)
			})

			t.Run("Handoff", func(t *testing.T) {
				r := runHandoff(t, e, c, 5*time.Second, 2)
				if r.stuck > 0 && !ours(c) {
					// A competitor's waiter missed the release (seen with
					// rueidislock's invalidation-driven wait): the benchmark
					// reports it; it is not this module's failure.
					t.Logf("%s: waiter stuck on a free lock: %v", c.name, r.stuckErr)
					return
				}
				if r.lat.n != 2 || r.stuck != 0 {
					t.Errorf("%d hand-offs, want 2; %d stuck waiters (%v)", r.lat.n, r.stuck, r.stuckErr)
				}
				t.Logf("hand-off p50 %v max %v", r.lat.quantile(0.5), r.lat.max)
			})

			if c.autoRenew {
				t.Run("ManyLeases", func(t *testing.T) {
					// Hold past one renew interval (TTL/3) so renewals run.
					r := runManyLeases(t, e, c, 20, manyTTL, 0, manyTTL/3+500*time.Millisecond)
					if r.lost != 0 || r.releaseErr != 0 {
						anomaly("%d of %d leases lost, %d releases failed", r.lost, r.n, r.releaseErr)
					}
					if c.server == "redis" && r.commands == 0 {
						t.Errorf("no renew traffic while holding %d leases past TTL/3", r.n)
					}
					t.Logf("memory %.0f B/lease, %.2f goroutines/lease, %d commands (%s)", r.memPer, r.goroutines, r.commands, r.detail)
				})
			}
		})
	}
}

// ours reports whether c is fencedlock or the baseline, whose anomalies
// fail the smoke test; a competitor's are reported by the benchmarks.
func ours(c contender) bool {
	return c.name == baselineName || strings.HasPrefix(c.name, "fencedlock-")
}

func TestHist(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if d := float64(got-tc.want) / float64(tc.want); d < -0.04 || d > 0.04 {
			t.Errorf("quantile(%v) = %v, want %v within 4%%", tc.q, got, tc.want)
		}
	}
	if h.max != time.Millisecond || h.n != 1000 {
		t.Errorf("max %v n %d", h.max, h.n)
	}
	for _, v := range []time.Duration{0, 1, 31, 32, 33, 63, 64, 1000, 1 << 40} {
		if i := histIndex(v); histValue(i) < v || (i > 0 && histValue(i-1) >= v) {
			t.Errorf("value %d: bucket %d covers (%d, %d]", v, i, histValue(i-1), histValue(i))
		}
	}
}
