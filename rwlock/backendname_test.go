package rwlock_test

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TestTraceNamesTheBackend: the trace events of an RWLock's leases carry
// the name of the backend it runs on, as a Locker's do (Locker.BackendName:
// "memory", "redis", "goredis", "etcd"; package otel puts it in the
// fencedlock.backend attribute of every metric and span). They carried
// "rwlock", the package of the view each mode's Locker runs on, whatever
// the backend: an RWLock's metrics fell out of every per-backend view.
func TestTraceNamesTheBackend(t *testing.T) {
	srv := testserver.StartRedis(t)
	type backend struct {
		name string
		open func(t *testing.T) driver.Backend
	}
	all := []backend{{"memory", func(*testing.T) driver.Backend { return memory.New() }}}
	for _, cl := range backendtest.RedisClients {
		all = append(all, backend{cl.Name, func(t *testing.T) driver.Backend {
			b, _ := cl.Open(t, srv)
			t.Cleanup(func() { b.Close() })
			return b
		}})
	}
	for _, be := range all {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			plain, err := fencedlock.New(b, fencedlock.Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := plain.BackendName()
			plain.Close()
			ev := locktest.NewTraceNames(want)
			r, err := rwlock.New(b, fencedlock.Options{Trace: ev.Trace()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx := t.Context()
			rl, err := r.RLock(ctx, "traced")
			if err != nil {
				t.Fatal(err)
			}
			if err := rl.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := r.TryLock(ctx, "traced"); err == nil {
				t.Fatal("TryLock beside a reader: granted")
			}
			if err := rl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wl, err := r.Lock(ctx, "traced")
			if err != nil {
				t.Fatal(err)
			}
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			ev.Check(t, 6, "an RWLock on "+be.name)
		})
	}
}
