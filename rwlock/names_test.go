package rwlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
	"github.com/fencedlock/fencedlock/rwlock"
)

// wantName fails unless msg names the read-write lock as the caller does
// ("cfg", quoted) and never shows the readers' Locker key (the name, a NUL
// byte and a number), raw or quoted.
func wantName(t *testing.T, what, msg string) {
	t.Helper()
	if strings.Contains(msg, "\x00") || strings.Contains(msg, `\x00`) {
		t.Errorf("%s shows the internal key: %s", what, msg)
	}
	if !strings.Contains(msg, `"cfg"`) && !strings.Contains(msg, "key=cfg") {
		t.Errorf("%s does not name %q: %s", what, "cfg", msg)
	}
}

// syncBuffer is a bytes.Buffer for a logger written from several
// goroutines (the watchdog's).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// events records the key and error of every trace event.
type events struct {
	mu  sync.Mutex
	all []string
}

func (e *events) add(kind, key string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, fmt.Sprintf("%s key=%q err=%v", kind, key, err))
}

func (e *events) trace() *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart: func(ctx context.Context, ev locktrace.AcquireStartEvent) context.Context {
			e.add("acquire start", ev.Key, nil)
			return ctx
		},
		AcquireWait: func(_ context.Context, ev locktrace.AcquireWaitEvent) { e.add("acquire wait", ev.Key, ev.Err) },
		AcquireEnd:  func(_ context.Context, ev locktrace.AcquireEndEvent) { e.add("acquire end", ev.Key, ev.Err) },
		Renewed:     func(_ context.Context, ev locktrace.RenewEvent) { e.add("renewed", ev.Key, ev.Err) },
		LeaseEnd:    func(ev locktrace.LeaseEndEvent) { e.add("lease end", ev.Key, ev.Err) },
		ReleaseStart: func(ctx context.Context, ev locktrace.LeaseInfo) context.Context {
			e.add("release start", ev.Key, nil)
			return ctx
		},
		ReleaseEnd: func(_ context.Context, ev locktrace.ReleaseEndEvent) { e.add("release end", ev.Key, ev.Err) },
	}
}

// flaky is a memory backend whose next fail read acquires fail with a
// transient error (the Locker retries them and logs why).
type flaky struct {
	*memory.Backend
	fail atomic.Int32
}

func (f *flaky) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	if req.Mode == driver.Read && f.fail.Add(-1) >= 0 {
		return driver.Grant{}, errors.New("flaky: connection reset")
	}
	return f.Backend.AcquireRW(ctx, req)
}

// TestReaderMessagesNameTheName: whatever a caller of RLock or TryRLock
// sees (the error of an acquire refused, of one whose context ended, of
// one on a closed RWLock; a read lease's Err, the cause of its Context,
// the errors of Renew and Release once it is lost; the RWLock's log lines
// and trace events, also of an attempt that failed and was retried) names the read-write lock by its name, never by the
// readers' Locker key (name, NUL, sequence number), which printed as
// "cfg\x003" before.
func TestReaderMessagesNameTheName(t *testing.T) {
	st := memory.NewStore()
	logs := &syncBuffer{}
	ev := &events{}
	f := &flaky{Backend: st.Backend()}
	r, err := rwlock.New(f, fencedlock.Options{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Trace:  ev.trace(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := t.Context()

	f.fail.Store(1)
	l, err := r.RLock(ctx, "cfg") // logs its failed attempt, then is granted
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "flaky") {
		t.Fatalf("no log line of the failed attempt:\n%s", logs)
	}

	w, err := r.Lock(ctx, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.TryRLock(ctx, "cfg")
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("TryRLock beside a writer: %v, want ErrNotAcquired", err)
	}
	wantName(t, "TryRLock refused", err.Error())
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = r.RLock(wctx, "cfg")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RLock beside a writer: %v, want the context's error", err)
	}
	wantName(t, "RLock whose context ended", err.Error())
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l, err = r.RLock(ctx, "cfg", fencedlock.WithTTL(100*time.Millisecond), fencedlock.WithManualRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // past the local deadline and the server's expiry
	if err := l.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Fatalf("Err of a read lease past its TTL: %v, want ErrLeaseLost", err)
	} else {
		wantName(t, "Err of a lost read lease", err.Error())
	}
	wantName(t, "the cause of a lost read lease's Context", context.Cause(l.Context()).Error())
	if err := l.Renew(ctx); err == nil {
		t.Fatal("Renew of a lost read lease: nil")
	} else {
		wantName(t, "Renew of a lost read lease", err.Error())
	}
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release of a lost read lease: nil")
	} else {
		wantName(t, "Release of a lost read lease", err.Error())
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = r.RLock(ctx, "cfg")
	if !errors.Is(err, fencedlock.ErrClosed) {
		t.Fatalf("RLock on a closed RWLock: %v, want ErrClosed", err)
	}
	wantName(t, "RLock on a closed RWLock", err.Error())

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d log lines, want the acquires, the loss and the releases:\n%s", len(lines), logs)
	}
	for _, line := range lines {
		wantName(t, "log line", line)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.all) < 6 {
		t.Fatalf("%d trace events, want the acquires, waits, the loss and the releases: %q", len(ev.all), ev.all)
	}
	for _, e := range ev.all {
		wantName(t, "trace event", e)
	}
}
