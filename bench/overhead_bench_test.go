package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// BenchmarkOverhead splits fencedlock/redis's uncontended acquire+release
// into layers on one client: the raw baseline, the Redis backend called
// directly (its scripts and key handling), Locker.TryAcquire and
// Locker.Acquire (adding the root package: lease, watchdog, contexts,
// logging). The differences show where time and allocations go. Each
// layer runs at concurrency 1 and 64 (64 goroutines on the one client,
// each on its own key), timed as in BenchmarkAcquireRelease (runOps: same
// latency, command and server CPU metrics), so a gap at 64 shows whether
// it is in the client's layers or on the server. Every layer above raw is
// also paired with it op by op (vs-base), as the contenders are with the
// baseline; odd passes run the layers in reverse order (passOrder).
func BenchmarkOverhead(b *testing.B) {
	e := servers(b)
	be, c := e.newRedisBackend(b)
	defer c.Close()
	l := mustLocker(b, be, fencedlock.Options{TTL: benchTTL})
	defer l.Close()
	raw := &rawClient{c: c, ttl: strconv.FormatInt(benchTTL.Milliseconds(), 10)}
	type layer struct {
		name string
		op   func(ctx context.Context, key string) error
	}
	layers := []layer{
		{"raw", func(ctx context.Context, k string) error {
			h, err := raw.acquire(ctx, k)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}},
		{"backend", func(ctx context.Context, k string) error {
			g, err := be.Acquire(ctx, driver.AcquireRequest{Key: k, Owner: rand.Text(), TTL: benchTTL})
			if err != nil {
				return err
			}
			return be.Release(ctx, g)
		}},
		{"locker-try", func(ctx context.Context, k string) error {
			ls, err := l.TryAcquire(ctx, k)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
		{"locker", func(ctx context.Context, k string) error {
			ls, err := l.Acquire(ctx, k)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			for _, ly := range passOrder(layers, *flagPass) {
				b.Run("layer="+ly.name, func(b *testing.B) {
					setup := func(ly layer, name string) func(i int) (func(context.Context) error, func()) {
						return func(i int) (func(context.Context) error, func()) {
							k := key("overhead", name, conc*1000+i)
							return func(ctx context.Context) error { return ly.op(ctx, k) }, func() {}
						}
					}
					// Every layer above raw is also paired with raw, op
					// by op (vs-base).
					var base func(i int) (func(context.Context) error, func())
					if ly.name != "raw" {
						base = setup(layers[0], ly.name+"-base")
					}
					// The contender only names the layer and its server
					// for runOps' Redis metrics; the client is shared.
					runOpsPaired(b, e, contender{name: "overhead-" + ly.name, server: "redis"}, conc, setup(ly, ly.name), base, "vs-base")
				})
			}
		})
	}
}
