package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestFenceCounterRefusedUnchanged: the scripts increment the fence
// counter first and check the result (INCR itself refuses what is not a
// decimal integer), so a counter they refuse must be put back exactly as
// it was, value and TTL, whichever script refused it: acquire.lua
// (Backend.Acquire), wait.lua taking a free lock, and release.lua's
// hand-off to a queued waiter (which then releases plainly). The values
// include integers beyond what a Lua number holds exactly, where the
// undo works on the digits.
func TestFenceCounterRefusedUnchanged(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
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
				if n := num(t, c, "LLEN", lk+queueSuffix); n != 1 {
					t.Errorf("%s: queue length %d after the refused hand-off, want the waiter kept", key, n)
				}
			case tc.exhausted:
				if !errors.Is(err, ErrFenceExhausted) && !strings.Contains(errString(err), redisscript.ExhaustedCode) {
					t.Errorf("%s: %v, want ErrFenceExhausted", key, err)
				}
			default:
				if !errors.Is(err, ErrCorrupt) && !strings.Contains(errString(err), redisscript.CorruptCode) {
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
