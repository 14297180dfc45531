package locktest

import (
	"context"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock/locktrace"
)

// TraceNames records the backend name every trace event carries, by event
// kind, against the name a plain Locker on the same backend gives it: the
// packages whose Lockers run on views (rwlock, semaphore, multilock) must
// name the backend, not themselves.
type TraceNames struct {
	want string
	mu   sync.Mutex
	got  map[string]string // event kind -> a Backend it carried
	bad  []string          // "kind: Backend" of events that did not carry want
}

// NewTraceNames returns a recorder of events that should carry want.
func NewTraceNames(want string) *TraceNames {
	return &TraceNames{want: want, got: map[string]string{}}
}

func (n *TraceNames) add(kind, backend string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got[kind] = backend
	if backend != n.want {
		n.bad = append(n.bad, kind+": "+backend)
	}
}

// Trace returns a Trace that records every event into n.
func (n *TraceNames) Trace() *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart: func(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
			n.add("AcquireStart", e.Backend)
			return ctx
		},
		AcquireWait: func(_ context.Context, e locktrace.AcquireWaitEvent) { n.add("AcquireWait", e.Backend) },
		AcquireEnd:  func(_ context.Context, e locktrace.AcquireEndEvent) { n.add("AcquireEnd", e.Backend) },
		Renewed:     func(_ context.Context, e locktrace.RenewEvent) { n.add("Renewed", e.Backend) },
		LeaseEnd:    func(e locktrace.LeaseEndEvent) { n.add("LeaseEnd", e.Backend) },
		ReleaseStart: func(ctx context.Context, e locktrace.LeaseInfo) context.Context {
			n.add("ReleaseStart", e.Backend)
			return ctx
		},
		ReleaseEnd: func(_ context.Context, e locktrace.ReleaseEndEvent) { n.add("ReleaseEnd", e.Backend) },
	}
}

// Check fails t unless at least kinds kinds of event were seen and every
// event carried the wanted name; what names the traced object.
func (n *TraceNames) Check(t testing.TB, kinds int, what string) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.got) < kinds || len(n.bad) > 0 {
		t.Fatalf("trace events of %s: %d kinds seen (%v), want %d at least; carrying another backend than %q: %q", what, len(n.got), n.got, kinds, n.want, n.bad)
	}
}
