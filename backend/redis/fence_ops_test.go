package redis

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestFenceCounterWithTTL: a fence counter given a TTL by hand would
// expire and restart the fences of its name at 1. The acquire refuses it
// with ErrCorrupt, names the problem, and changes nothing: no lock, the
// counter and its TTL as they were.
func TestFenceCounterWithTTL(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	g := acquire(t, b, "ttl", time.Minute)
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	fk := b.FenceKey("ttl")
	do(t, c, "PEXPIRE", fk, "600000")
	_, err := b.Acquire(ctx, fencedlock.AcquireRequest{Key: "ttl", Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "TTL") {
		t.Fatalf("acquire with a counter that expires: %v, want ErrCorrupt naming the TTL", err)
	}
	t.Logf("counter with a TTL: %v", err)
	if n := num(t, c, "EXISTS", b.LockKey("ttl")); n != 0 {
		t.Fatal("lock taken despite the counter's TTL")
	}
	if v := str(t, c, "GET", fk); v != g.Fence.String() {
		t.Fatalf("counter changed to %s", v)
	}
	if pttl := num(t, c, "PTTL", fk); pttl <= 0 {
		t.Fatalf("counter's TTL changed: %d", pttl)
	}
	// Once the operator removed the TTL (PERSIST), fences continue.
	do(t, c, "PERSIST", fk)
	if g2 := acquire(t, b, "ttl", time.Minute); g2.Fence != g.Fence+1 {
		t.Fatalf("after PERSIST: fence %d, want %d", g2.Fence, g.Fence+1)
	}
}

// logRecorder is a slog.Handler keeping the messages and attributes it
// receives, for tests.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]string
}

func newLogRecorder() (*slog.Logger, func() []string) {
	h := logRecorder{mu: new(sync.Mutex), recs: new([]string)}
	return slog.New(h), func() []string {
		h.mu.Lock()
		defer h.mu.Unlock()
		return append([]string(nil), *h.recs...)
	}
}

func (h logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logRecorder) WithGroup(string) slog.Handler            { return h }
func (h logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, line)
	h.mu.Unlock()
	return nil
}

// TestEvictionPolicy: New reads maxmemory-policy (INFO memory) and
// refuses every evicting policy with ErrEvictionPolicy, unless
// AllowEvictingPolicy, which logs a warning instead. noeviction passes
// silently.
func TestEvictionPolicy(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, nil)
	for _, policy := range []string{"noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"} {
		do(t, c, "CONFIG", "SET", "maxmemory-policy", policy)
		log, records := newLogRecorder()
		b, err := New(c, Options{Logger: log})
		if policy == "noeviction" {
			if err != nil || len(records()) != 0 {
				t.Fatalf("noeviction: %v %v", err, records())
			}
			b.Close()
			continue
		}
		if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), policy) {
			if b != nil {
				b.Close()
			}
			t.Fatalf("%s: New: %v, want ErrEvictionPolicy naming the policy", policy, err)
		}
		t.Logf("%s: %v", policy, err)
		b, err = New(c, Options{Logger: log, AllowEvictingPolicy: true})
		if err != nil {
			t.Fatalf("%s with AllowEvictingPolicy: %v", policy, err)
		}
		b.Close()
		if recs := records(); len(recs) != 1 || !strings.HasPrefix(recs[0], "WARN") || !strings.Contains(recs[0], policy) {
			t.Fatalf("%s with AllowEvictingPolicy: logged %q, want one warning", policy, recs)
		}
	}
}

// TestEvictionPolicyUnreadable: a user without INFO (a least-privilege
// ACL) cannot read the policy: New works and logs a warning saying so.
func TestEvictionPolicyUnreadable(t *testing.T) {
	srv := redistest.Start(t, redistest.WithConfig("maxmemory-policy allkeys-lru",
		"user locker on >pw ~* &* +@all -info", "user default on nopass ~* &* +@all"))
	c := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "locker", "pw" })
	log, records := newLogRecorder()
	b, err := New(c, Options{Logger: log})
	if err != nil {
		t.Fatalf("New without INFO: %v", err)
	}
	b.Close()
	if recs := records(); len(recs) != 1 || !strings.Contains(recs[0], "maxmemory-policy") || !strings.HasPrefix(recs[0], "WARN") {
		t.Fatalf("logged %q, want one warning about the unreadable policy", recs)
	}
	t.Logf("%s", records()[0])
}
