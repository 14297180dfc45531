package redisscript

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

func TestTTLCache(t *testing.T) {
	var c TTLCache
	for _, tc := range []struct {
		ttl  time.Duration
		ms   int64
		text string
	}{
		{10 * time.Second, 10000, "10000"},
		{1500 * time.Microsecond, 2, "2"}, // rounded up
		{time.Nanosecond, 1, "1"},
		{10 * time.Second, 10000, "10000"},
	} {
		a := c.Get(tc.ttl)
		if a.Ms != tc.ms || a.S != tc.text || a.Arg != any(tc.text) || a.Duration() != time.Duration(tc.ms)*time.Millisecond {
			t.Errorf("Get(%v) = %+v, want %d ms", tc.ttl, a, tc.ms)
		}
	}
	if a, b := c.Get(time.Second), c.Get(time.Second); a != b {
		t.Error("Get of the same TTL twice converted it twice")
	}
}

type replyErr string

func (e replyErr) Error() string { return string(e) }

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		msg       string
		reply     bool
		want      error
		permanent bool
	}{
		{redisnames.AbandonedCode + " x", true, driver.ErrNotAcquired, false},
		{redisnames.ExhaustedCode + " x", true, ErrFenceExhausted, true},
		{"WRONGTYPE x", true, ErrCorrupt, true},
		{"ERR x " + redisnames.CorruptCode + " y", true, ErrCorrupt, true},
		{"NOPERM x", true, nil, true},
		{"WRONGTYPE x", false, nil, false}, // not a reply: no code is read
	} {
		err := Wrap("acquire", "k", replyErr(tc.msg), false, tc.reply)
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("Wrap(%q): %v, want it to wrap %v", tc.msg, err, tc.want)
		}
		if got := errors.Is(err, driver.ErrPermanent); got != tc.permanent {
			t.Errorf("Wrap(%q) wraps ErrPermanent: %v, want %v", tc.msg, got, tc.permanent)
		}
	}
	if err := Wrap("renew", "k", errors.New("closed"), true, false); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Wrap of a closed client: %v, want ErrClosed", err)
	}
}

func TestResolve(t *testing.T) {
	o, err := Options{WaitReplicas: 1}.Resolve()
	if err != nil || o.KeyPrefix != DefaultKeyPrefix || o.WaitTimeout != DefaultWaitTimeout ||
		o.MaxShardedConns != DefaultMaxShardedConns || o.Logger == nil {
		t.Fatalf("Resolve of the zero options: %+v, %v", o, err)
	}
	for _, bad := range []Options{
		{KeyPrefix: "a{"}, {WaitReplicas: -1}, {WaitTimeout: -1}, {MaxShardedConns: maxSlots + 1},
	} {
		if _, err := bad.Resolve(); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("Resolve(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}
