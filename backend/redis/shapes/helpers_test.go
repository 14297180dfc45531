package shapes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A cluster client's topology refresh sleeps before retrying.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}

// newBackend returns a redis.Backend on c, closed when the test ends.
func newBackend(t testing.TB, c rueidis.Client, opts redis.Options) *redis.Backend {
	t.Helper()
	b, err := redis.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// newLocker returns a Locker on b, closed when the test ends.
func newLocker(t testing.TB, b fencedlock.Backend, opts fencedlock.Options) *fencedlock.Locker {
	t.Helper()
	l := fencedlock.New(b, opts)
	t.Cleanup(func() { l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// do runs a raw command.
func do(c rueidis.Client, args ...string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Arbitrary(args...).Build())
}

// history records guarded writes that a fencing.Guard accepted, in the
// order the guard accepted them, and checks them independently of the
// guard: a write is stale if its token is lower than one accepted before,
// or equal to it from another holder.
type history struct {
	mu       sync.Mutex
	accepted []write
	rejected int
}

type write struct {
	token  fencing.Token
	holder string
	value  string
}

// write applies one guarded write through g and records the outcome; the
// record is made inside the guard's critical section, so its order is the
// order of acceptance.
func (h *history) write(g *fencing.Guard, token fencing.Token, holder, value string) error {
	err := g.Do(token, holder, func() error {
		h.mu.Lock()
		h.accepted = append(h.accepted, write{token, holder, value})
		h.mu.Unlock()
		return nil
	})
	if err != nil {
		h.mu.Lock()
		h.rejected++
		h.mu.Unlock()
	}
	return err
}

// stale counts accepted writes that break the fencing rule.
func (h *history) stale() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var maxTok fencing.Token
	var maxHolder string
	for i, w := range h.accepted {
		if i > 0 && (w.token < maxTok || (w.token == maxTok && w.holder != maxHolder)) {
			n++
			continue
		}
		maxTok, maxHolder = w.token, w.holder
	}
	return n
}

func (h *history) counts() (accepted, rejected int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.accepted), h.rejected
}
