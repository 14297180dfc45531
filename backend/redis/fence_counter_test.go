package redis

// Fence counters the scripts must refuse: one at the largest fence a Lua
// number holds exactly, and one that is not a decimal counter, each left
// as it was.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// TestFenceCounterBoundary walks a fence counter up to 2^53, the largest
// integer Lua numbers (doubles) represent exactly, on a real server: every
// fence up to 2^53 is granted exactly, a retry of the holder of 2^53 gets
// it again, and the next acquire of the free lock fails with
// ErrFenceExhausted (not ErrCorrupt) and changes nothing. Above 2^53 a
// counter was not written by fencedlock: ErrCorrupt.
func TestFenceCounterBoundary(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	const max = 1 << 53
	fk := b.FenceKey("edge")
	do(t, c, "SET", fk, strconv.FormatInt(max-2, 10))
	for _, want := range []int64{max - 1, max} {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire at counter %d: %v", want-1, err)
		}
		if int64(g.Fence) != want || str(t, c, "GET", fk) != strconv.FormatInt(want, 10) {
			t.Fatalf("fence %d, counter %s, want %d", g.Fence, str(t, c, "GET", fk), want)
		}
		info, err := b.Inspect(ctx, "edge")
		if err != nil || int64(info.Fence) != want {
			t.Fatalf("inspect: %+v %v", info, err)
		}
		if want == max {
			// The holder's retry (its first reply lost) gets 2^53 again.
			again, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: g.Owner, TTL: time.Minute})
			if err != nil || again.Fence != g.Fence {
				t.Fatalf("retry of the holder of 2^53: %+v %v", again, err)
			}
			// Another owner waits for the holder, as for any held lock.
			var held *driver.HeldError
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute}); !errors.As(err, &held) {
				t.Fatalf("another owner while 2^53 is held: %v, want HeldError", err)
			}
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "edge", Owner: owner(), TTL: time.Minute})
	if !errors.Is(err, ErrFenceExhausted) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("acquire past 2^53: %v, want ErrFenceExhausted", err)
	}
	t.Logf("past 2^53: %v", err)
	if n := num(t, c, "EXISTS", b.LockKey("edge")); n != 0 {
		t.Fatal("exhausted acquire left the lock behind")
	}
	if v := str(t, c, "GET", fk); v != strconv.FormatInt(max, 10) {
		t.Fatalf("counter changed to %s", v)
	}
	for _, bad := range []string{"9007199254740993", "9999999999999999", "10000000000000000"} {
		key := "over-" + bad
		do(t, c, "SET", b.FenceKey(key), bad)
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("counter %s: %v, want ErrCorrupt", bad, err)
		}
		if _, err := b.Inspect(ctx, key); !errors.Is(err, ErrCorrupt) {
			t.Errorf("inspect of counter %s: %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestFenceCounterRefusedUnchanged: the scripts increment the fence
// counter first and check the result (INCR itself refuses what is not a
// decimal integer), so a counter they refuse must be put back exactly as
// it was, value and TTL, whichever script refused it: acquire.lua
// (Backend.Acquire), wait.lua taking a free lock, and release.lua's
// hand-off to a queued waiter (which then releases plainly). The values
// include integers beyond what a Lua number holds exactly, where the
// undo works on the digits.
func TestFenceCounterRefusedUnchanged(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	cases := []struct {
		val       string
		ttl       bool // the counter has a TTL: refused for that alone
		exhausted bool
	}{
		{val: "-1"}, {val: "-10"}, {val: "-9223372036854775808"}, {val: "-9007199254740999"},
		{val: "9007199254740993"}, {val: "9007199254740999"}, {val: "10000000000000000"},
		{val: "99999999999999999"}, {val: "9223372036854775807"}, {val: "007"}, {val: "+5"}, {val: " 5"},
		{val: "9007199254740992", exhausted: true},
		{val: "41", ttl: true}, {val: "0", ttl: true}, {val: "9", ttl: true}, {val: "-3", ttl: true},
	}
	for _, tc := range cases {
		for _, path := range []string{"acquire", "wait", "hand-off"} {
			key := "refuse/" + path + "/" + tc.val
			fk, lk := b.FenceKey(key), b.LockKey(key)
			var h driver.Grant
			if path == "hand-off" {
				h = acquire(t, b, key, time.Minute)
				if n, err := runWait(t, b, key, owner(), time.Minute, time.Minute); err != nil || n != 0 {
					t.Fatalf("%s: wait.lua = %d, %v; want queued", key, n, err)
				}
			}
			do(t, c, "SET", fk, tc.val)
			if tc.ttl {
				do(t, c, "PEXPIRE", fk, "600000")
			}
			var err error
			switch path {
			case "acquire":
				_, err = b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
			case "wait":
				_, err = runWait(t, b, key, owner(), time.Minute, time.Minute)
			case "hand-off":
				err = b.Release(ctx, h)
			}
			switch {
			case path == "hand-off":
				if err != nil {
					t.Errorf("%s: release: %v, want a plain release", key, err)
				}
				if n := num(t, c, "LLEN", lk+redisnames.QueueSuffix); n != 1 {
					t.Errorf("%s: queue length %d after the refused hand-off, want the waiter kept", key, n)
				}
			case tc.exhausted:
				if !errors.Is(err, ErrFenceExhausted) && !strings.Contains(errString(err), redisnames.ExhaustedCode) {
					t.Errorf("%s: %v, want ErrFenceExhausted", key, err)
				}
			default:
				if !errors.Is(err, ErrCorrupt) && !strings.Contains(errString(err), redisnames.CorruptCode) {
					t.Errorf("%s: %v, want ErrCorrupt", key, err)
				}
			}
			if got := str(t, c, "GET", fk); got != tc.val {
				t.Errorf("%s: counter %q after the refusal, want %q", key, got, tc.val)
			}
			pttl := num(t, c, "PTTL", fk)
			if tc.ttl != (pttl > 0) || !tc.ttl && pttl != -1 {
				t.Errorf("%s: counter PTTL %d after the refusal (TTL before: %v)", key, pttl, tc.ttl)
			}
			if n := num(t, c, "EXISTS", lk); n != 0 {
				t.Errorf("%s: lock left behind", key)
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
