package etcd

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// unreachableClient returns a client whose endpoint has no server: enough
// for the checks here, which never reach the network.
func unreachableClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOptions(t *testing.T) {
	c := unreachableClient(t)
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Options(); got.KeyPrefix != DefaultKeyPrefix || got.CleanupTimeout != DefaultCleanupTimeout {
		t.Errorf("defaults = %+v", got)
	}
	b.Close()
	if _, err := New(c, Options{CleanupTimeout: -time.Second}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("negative CleanupTimeout: err = %v, want ErrInvalid", err)
	}
	if _, err := New(nil, Options{}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("nil client: err = %v, want ErrInvalid", err)
	}
	b, err = New(c, Options{KeyPrefix: "p/", CleanupTimeout: time.Second})
	if err != nil || b.Options().KeyPrefix != "p/" || b.Options().CleanupTimeout != time.Second || b.Options().Logger == nil {
		t.Errorf("explicit options: %+v, %v", b.Options(), err)
	}
	b.Close()
}

func TestKeyNaming(t *testing.T) {
	b := &Backend{opts: Options{KeyPrefix: "fl/"}}
	// An entry is named by its lease (which carries at most one key), so
	// a pooled lease reuses its names; the owner token never appears.
	owner := clientv3.LeaseID(0x694d8a2c3f1e0b07)
	if got, want := b.entry("orders", owner), "fl/locks/orders/694d8a2c3f1e0b07"; got != want {
		t.Errorf("entry = %q, want %q", got, want)
	}
	if got, want := b.entry("orders", 0x1f), "fl/locks/orders/000000000000001f"; got != want {
		t.Errorf("entry = %q, want %q (16 hex digits)", got, want)
	}
	// No lock's queue directory may contain another lock's entries.
	keys := []string{"a", "a/b", "a/", "/a", "a%2Fb", "a%b", "{a}", "a b", "\xff\xfe", "a/b/c", strings.Repeat("k", driver.MaxKeyLen)}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 == k2 {
				continue
			}
			if strings.HasPrefix(b.entry(k2, owner), b.lockDir(k1)) {
				t.Errorf("entry of %q lies in the directory of %q", k2, k1)
			}
			if b.fenceKey(k1) == b.fenceKey(k2) {
				t.Errorf("fence keys of %q and %q collide", k1, k2)
			}
		}
		if !strings.HasSuffix(b.lockDir(k1), "/") || strings.Count(b.lockDir(k1), "/") != 3 {
			t.Errorf("lockDir(%q) = %q: want exactly three slashes, the last at the end", k1, b.lockDir(k1))
		}
	}
}

func TestTTLSeconds(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{
		{driver.MinTTL, 1}, {time.Second, 1}, {time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2}, {10 * time.Second, 10}, {driver.MaxTTL, 86400},
	} {
		if got := ttlSeconds(c.ttl); got != c.want {
			t.Errorf("ttlSeconds(%v) = %d, want %d (rounded up)", c.ttl, got, c.want)
		}
	}
}

// The fence record's byte order must be the numeric order of fences: the
// Txn of FencedStore.Set compares values byte-wise.
func TestFenceRecordOrder(t *testing.T) {
	tokens := []fencing.Token{1, 9, 10, 99, 100, 41, 42, 1 << 32, 1<<64 - 1}
	recs := make([]string, len(tokens))
	for i, tok := range tokens {
		recs[i] = fenceRecord(tok, "h")
		got, holder, err := parseFenceRecord([]byte(recs[i]))
		if err != nil || got != tok || holder != "h" {
			t.Errorf("round trip of %d: %d %q %v", tok, got, holder, err)
		}
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	sort.Strings(recs)
	for i := range tokens {
		if !strings.HasPrefix(recs[i], fenceRecord(tokens[i], "")) {
			t.Errorf("byte order differs from numeric order at %d: %q vs %d", i, recs[i], tokens[i])
		}
	}
	// "<fence> <holder>" sorts below the bare padded larger token, and not
	// below its own bare token: the "<" compare of FencedStore.Set.
	if !(fenceRecord(41, "zzzz") < fenceRecord(42, "")[:fenceDigits]) || fenceRecord(42, "a") < fenceRecord(42, "")[:fenceDigits] {
		t.Error("record comparison against a bare token is wrong")
	}
	for _, bad := range []string{"", "42", "0000000000000000004x h", "00000000000000000042h"} {
		if _, _, err := parseFenceRecord([]byte(bad)); err == nil {
			t.Errorf("parseFenceRecord(%q) accepted", bad)
		}
	}
}

func TestClosed(t *testing.T) {
	b, err := New(unreachableClient(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second}
	if _, err := b.Acquire(ctx, req); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Acquire after Close: %v", err)
	}
	if _, err := b.AcquireWait(ctx, req); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("AcquireWait after Close: %v", err)
	}
	if err := b.Release(ctx, driver.Grant{Key: "k", Owner: "o"}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Release after Close: %v", err)
	}
	if _, err := b.Inspect(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Inspect after Close: %v", err)
	}
	if err := NewFencedStore(b).Set(ctx, "data", "v", 1, "h"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("FencedStore.Set after Close: %v", err)
	}
	if err := NewFencedStore(b).Update(ctx, "data", 1, "h", func(fencing.Record) (string, error) { return "v", nil }); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("FencedStore.Update after Close: %v", err)
	}
	if _, err := NewFencedStore(b).Get(ctx, "data"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("FencedStore.Get after Close: %v", err)
	}
	if _, ok := <-b.KeepAlive(ctx, driver.Grant{Key: "k", Data: &grant{ttl: time.Second}}); ok {
		t.Error("KeepAlive after Close: channel not closed")
	}
}

func TestInvalidInput(t *testing.T) {
	b, err := New(unreachableClient(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := NewFencedStore(b).Set(ctx, "data", "v", 0, "h"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Errorf("zero token: %v", err)
	}
	for _, k := range []string{"", DefaultKeyPrefix + "locks/x/y"} {
		if err := NewFencedStore(b).Set(ctx, k, "v", 1, "h"); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("FencedStore.Set(%q): %v, want ErrInvalid", k, err)
		}
		if err := NewFencedStore(b).Update(ctx, k, 1, "h", nil); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("FencedStore.Update(%q): %v, want ErrInvalid", k, err)
		}
	}
	if _, err := b.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("Inspect empty key: %v", err)
	}
	// A Grant this backend did not make cannot be kept alive.
	r, ok := <-b.KeepAlive(ctx, driver.Grant{Key: "k"})
	if !ok || !errors.Is(r.Err, driver.ErrNotHeld) {
		t.Errorf("KeepAlive of a foreign grant: %v %v", r, ok)
	}
}

// TestGrantInterval: the keepalive interval is the one the request asked
// for when it is shorter than the TTL the server applied, else TTL/3 (a
// request with none, or one the rounded-up TTL makes meaningless), and
// never below 10ms.
func TestGrantInterval(t *testing.T) {
	for _, c := range []struct {
		ttl, renew, want time.Duration
	}{
		{3 * time.Second, 0, time.Second},
		{3 * time.Second, 2 * time.Second, 2 * time.Second},
		{3 * time.Second, 3 * time.Second, time.Second},
		{3 * time.Second, 5 * time.Second, time.Second},
		{time.Second, 100 * time.Millisecond, 100 * time.Millisecond}, // asked 300ms, applied 1s
		{time.Second, time.Millisecond, 10 * time.Millisecond},
	} {
		g := &grant{ttl: c.ttl, renew: c.renew}
		if got := g.interval(); got != c.want {
			t.Errorf("TTL %v, asked %v: interval %v, want %v", c.ttl, c.renew, got, c.want)
		}
	}
}
