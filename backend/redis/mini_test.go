package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Fast unit tests on miniredis (no real time: its TTLs move with
// FastForward). The real-server tests are the evidence; these catch
// regressions quickly.

func TestMiniAcquireRenewRelease(t *testing.T) {
	b, m, _ := newMini(t)
	ctx := context.Background()
	g := acquire(t, b, "k", time.Second)
	if g.Fence != 1 || g.TTL != time.Second || g.Key != "k" {
		t.Fatalf("grant %+v", g)
	}
	if got := m.TTL(b.LockKey("k")); got != time.Second {
		t.Fatalf("TTL on the server %v", got)
	}
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second})
	var held *driver.HeldError
	if !errors.As(err, &held) || held.RetryAfter != time.Second {
		t.Fatalf("held: %v", err)
	}
	if _, err := b.Renew(ctx, g, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := m.TTL(b.LockKey("k")); got != 3*time.Second {
		t.Fatalf("TTL after renew %v", got)
	}
	m.FastForward(3 * time.Second) // expiry, no release
	if _, err := b.Renew(ctx, g, time.Second); !isNotHeld(err) {
		t.Fatalf("renew after expiry: %v", err)
	}
	if err := b.Release(ctx, g); !isNotHeld(err) {
		t.Fatalf("release after expiry: %v", err)
	}
	g2 := acquire(t, b, "k", time.Second)
	if g2.Fence != 2 {
		t.Fatalf("fence after expiry %d, want 2", g2.Fence)
	}
	if err := b.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Get(b.FenceKey("k")); v != "2" {
		t.Fatalf("fence counter %q after release, want 2", v)
	}
	if m.TTL(b.FenceKey("k")) != 0 {
		t.Fatal("fence counter has a TTL")
	}
}

func TestMiniCorrupt(t *testing.T) {
	b, m, _ := newMini(t)
	ctx := context.Background()
	m.Set(b.FenceKey("k"), "x")
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: owner(), TTL: time.Second}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt counter: %v", err)
	}
	if m.Exists(b.LockKey("k")) {
		t.Fatal("lock left behind")
	}
	m.HSet(b.LockKey("h"), "f", "v")
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "h", Owner: owner(), TTL: time.Second}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("hash lock key: %v", err)
	}
}

func TestParseFence(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "1": true, "999999999999999": true,
		"1000000000000000": true, "9007199254740992": true, "": false, "00": false, "01": false, "-1": false, "1a": false,
		"9007199254740993": false, "9999999999999999": false, "10000000000000000": false, "18446744073709551616": false} {
		if _, ok := redisscript.ParseFence(s); ok != want {
			t.Errorf("ParseFence(%q) ok=%v, want %v", s, ok, want)
		}
	}
	if f, _ := redisscript.ParseFence("12345"); f != 12345 {
		t.Errorf("ParseFence(12345) = %d", f)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{"orders": "orders", "}": "%7D", "{": "%7B", "%": "%25", "a{b}c%d": "a%7Bb%7Dc%25d"} {
		if got := redisscript.Escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}
