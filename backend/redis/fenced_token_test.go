package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// evalByHand runs a committed script with the real redis-cli --eval and
// returns its output, error replies included (redis-cli's exit status is
// not relied on).
func evalByHand(t *testing.T, srv *testserver.Redis, name string, args ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "internal", "redisscript", name)
	full := append([]string{"-p", fmt.Sprint(srv.Port), "--eval", script}, args...)
	out, _ := exec.Command(testserver.Binary(t, "redis-cli"), full...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// TestFencedWriteTokenRange: fenced_write.lua accepts exactly the tokens
// that are uint64 values in the script's form (decimal, no sign, no
// leading zero, at most 18446744073709551615). Anything else, sent by hand
// through redis-cli --eval, is refused with an error naming the token and
// writes nothing, so the resource is never poisoned for the Go reader
// (FencedGet) and writer (FencedSet).
func TestFencedWriteTokenRange(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	if out := evalByHand(t, srv, "fenced_write.lua", "res", ",", "5", "A", "value", "v5"); out != "1" {
		t.Fatalf("token 5: %q", out)
	}
	before := hgetall(t, c, "res")
	for _, tok := range []string{
		"18446744073709551616",  // 2^64
		"99999999999999999999",  // 20 digits, above 2^64-1
		"20000000000000000000",  // 20 digits, first digit above 1
		"184467440737095516150", // 21 digits
		"0", "00", "05", "+5", "-5", " 5", "5 ", "5.0", "1e3", "0x10", "",
	} {
		out := evalByHand(t, srv, "fenced_write.lua", "res", ",", tok, "B", "value", "bad")
		if !strings.Contains(out, "token") || !strings.Contains(out, "ERR") {
			t.Errorf("token %q: script replied %q, want an error about the token", tok, out)
		}
		if after := hgetall(t, c, "res"); !maps.Equal(before, after) {
			t.Fatalf("token %q: hash changed to %v", tok, after)
		}
	}
	if rec, err := b.FencedGet(ctx, "res"); err != nil || rec.Value != "v5" || rec.Fence != 5 || rec.Holder != "A" {
		t.Fatalf("FencedGet after the refused tokens: %+v %v", rec, err)
	}
	if err := b.FencedSet(ctx, "res", "old", 4, "C"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("older FencedSet: %v, want ErrStale", err)
	}
	// The largest uint64 is accepted, by hand and read back in Go.
	if out := evalByHand(t, srv, "fenced_write.lua", "res", ",", "18446744073709551615", "D", "value", "max"); out != "1" {
		t.Fatalf("token 2^64-1: %q", out)
	}
	if rec, err := b.FencedGet(ctx, "res"); err != nil || rec.Value != "max" || uint64(rec.Fence) != 1<<64-1 || rec.Holder != "D" {
		t.Fatalf("FencedGet after 2^64-1: %+v %v", rec, err)
	}
	if err := b.FencedSet(ctx, "res", "old", 5, "C"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("FencedSet after 2^64-1: %v, want ErrStale", err)
	}
}
