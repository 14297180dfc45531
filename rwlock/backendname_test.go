package rwlock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/locktrace"
	"github.com/fencedlock/fencedlock/rwlock"
)

// backends records the Backend of every trace event.
type backends struct {
	mu  sync.Mutex
	got map[string]string // event kind -> a Backend it carried
	bad []string          // "kind: Backend" of events that did not carry want
}

func (b *backends) add(kind, backend, want string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got[kind] = backend
	if backend != want {
		b.bad = append(b.bad, kind+": "+backend)
	}
}

func (b *backends) trace(want string) *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart: func(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
			b.add("AcquireStart", e.Backend, want)
			return ctx
		},
		AcquireWait: func(_ context.Context, e locktrace.AcquireWaitEvent) { b.add("AcquireWait", e.Backend, want) },
		AcquireEnd:  func(_ context.Context, e locktrace.AcquireEndEvent) { b.add("AcquireEnd", e.Backend, want) },
		Renewed:     func(_ context.Context, e locktrace.RenewEvent) { b.add("Renewed", e.Backend, want) },
		LeaseEnd:    func(e locktrace.LeaseEndEvent) { b.add("LeaseEnd", e.Backend, want) },
		ReleaseStart: func(ctx context.Context, e locktrace.LeaseInfo) context.Context {
			b.add("ReleaseStart", e.Backend, want)
			return ctx
		},
		ReleaseEnd: func(_ context.Context, e locktrace.ReleaseEndEvent) { b.add("ReleaseEnd", e.Backend, want) },
	}
}

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
			ev := &backends{got: map[string]string{}}
			r, err := rwlock.New(b, fencedlock.Options{Trace: ev.trace(want)})
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
			ev.mu.Lock()
			defer ev.mu.Unlock()
			if len(ev.got) < 6 || len(ev.bad) > 0 {
				t.Fatalf("trace events of an RWLock on %s: %d kinds seen (%v); carrying another backend than %q: %q", be.name, len(ev.got), ev.got, want, ev.bad)
			}
		})
	}
}
