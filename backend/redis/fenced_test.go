package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/guardtest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// fencedStep is one write of a table-driven guard test: the token and
// holder presented, and whether the guard must accept it.
type fencedStep struct {
	token  fencing.Token
	holder string
	accept bool
	why    string
}

var fencedSteps = []fencedStep{
	{5, "A", true, "first write: no record yet"},
	{5, "A", true, "equal token, same holder"},
	{5, "B", false, "equal token, another holder (a duplicated fence)"},
	{4, "A", false, "older token, even from the holder of the accepted one"},
	{6, "B", true, "greater token"},
	{5, "A", false, "older token after a newer one"},
	{1, "C", false, "much older token"},
	{7, "C", true, "greater token again"},
	{1 << 53, "D", true, "2^53"},
	{1<<53 + 1, "E", true, "2^53+1: Lua numbers cannot tell it from 2^53"},
	{1 << 53, "D", false, "2^53 after 2^53+1"},
	{math.MaxUint64 - 1, "F", true, "20 digits"},
	{99999999999999999, "G", false, "17 digits after 20 (length decides)"},
	{math.MaxUint64, "F", true, "largest token"},
}

// hgetall returns the whole hash at key.
func hgetall(t testing.TB, c rueidis.Client, key string) map[string]string {
	t.Helper()
	m, err := c.Do(context.Background(), c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", key, err)
	}
	return m
}

// testFencedRule runs fencedSteps through FencedSet and checks, after every
// step, the error, the StaleError details and the stored hash: unchanged on
// a rejection, the new value and record on an acceptance.
func testFencedRule(t *testing.T, b *Backend, c rueidis.Client) {
	ctx := context.Background()
	const key = "resource:{orders}"
	var accepted fencing.Token
	var acceptedFrom string
	for i, s := range fencedSteps {
		before := hgetall(t, c, key)
		value := fmt.Sprintf("v%d", i)
		err := b.FencedSet(ctx, key, value, s.token, s.holder)
		after := hgetall(t, c, key)
		// The rule implemented here must agree with fencing.Check.
		if want := fencing.Check(accepted, acceptedFrom, s.token, s.holder) == nil || i == 0; want != s.accept {
			t.Fatalf("step %d: table says accept=%v, fencing.Check disagrees", i, s.accept)
		}
		if s.accept {
			if err != nil {
				t.Fatalf("step %d (%s): token %d from %s rejected: %v", i, s.why, s.token, s.holder, err)
			}
			want := map[string]string{ValueField: value, FenceField: s.token.String(), HolderField: s.holder}
			if !maps.Equal(after, want) {
				t.Fatalf("step %d (%s): stored %v, want %v", i, s.why, after, want)
			}
			accepted, acceptedFrom = s.token, s.holder
			continue
		}
		var se *fencing.StaleError
		if !errors.Is(err, fencing.ErrStale) || !errors.As(err, &se) {
			t.Fatalf("step %d (%s): token %d from %s: got %v, want a StaleError", i, s.why, s.token, s.holder, err)
		}
		if se.Token != s.token || se.Holder != s.holder || se.Accepted != accepted || se.AcceptedFrom != acceptedFrom {
			t.Fatalf("step %d (%s): %+v, want accepted %d from %s", i, s.why, *se, accepted, acceptedFrom)
		}
		if !strings.HasPrefix(err.Error(), "redis: fenced set") {
			t.Fatalf("step %d: message %q lacks the package prefix", i, err)
		}
		if !maps.Equal(before, after) {
			t.Fatalf("step %d (%s): rejected write changed the hash: %v -> %v", i, s.why, before, after)
		}
	}
	rec, err := b.FencedGet(ctx, key)
	if want := (fencing.Record{Value: fmt.Sprintf("v%d", len(fencedSteps)-1), Found: true, Fence: math.MaxUint64, Holder: "F"}); err != nil || rec != want {
		t.Fatalf("FencedGet = %+v %v, want %+v", rec, err, want)
	}
	rec, err = b.FencedGet(ctx, "resource:absent")
	if err != nil || rec != (fencing.Record{}) {
		t.Fatalf("FencedGet of an absent hash = %+v %v", rec, err)
	}
}

func TestFencedSetRule(t *testing.T) {
	b, c := startBackend(t)
	calls := commandStats(t, c)
	testFencedRule(t, b, c)
	after := commandStats(t, c)
	scripts := after["evalsha"] + after["eval"] - calls["evalsha"] - calls["eval"]
	// One EVALSHA per write, plus one EVAL for the first (NOSCRIPT).
	if want := int64(len(fencedSteps) + 1); scripts != want {
		t.Fatalf("%d script calls for %d fenced writes, want %d", scripts, len(fencedSteps), want)
	}
	t.Logf("%d fenced writes: %d script calls (one round trip each, plus one NOSCRIPT fallback)", len(fencedSteps), scripts)
}

func TestFencedSetRuleMiniredis(t *testing.T) {
	b, _, c := newMini(t)
	testFencedRule(t, b, c)
}

func TestFencedHSet(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	const key = "account:{42}"
	do(t, c, "HSET", key, "owner", "ada") // a field the guard must not touch
	if err := b.FencedHSet(ctx, key, map[string]string{"balance": "10", "version": "1"}, 3, "A"); err != nil {
		t.Fatal(err)
	}
	err := b.FencedHSet(ctx, key, map[string]string{"balance": "0", "owner": "mallory"}, 2, "B")
	if !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("older token: %v", err)
	}
	want := map[string]string{"owner": "ada", "balance": "10", "version": "1", FenceField: "3", HolderField: "A"}
	if got := hgetall(t, c, key); !maps.Equal(got, want) {
		t.Fatalf("hash %v, want %v", got, want)
	}
	if err := b.FencedHSet(ctx, key, map[string]string{"balance": "11"}, 4, "B"); err != nil {
		t.Fatal(err)
	}
	want["balance"], want[FenceField], want[HolderField] = "11", "4", "B"
	if got := hgetall(t, c, key); !maps.Equal(got, want) {
		t.Fatalf("hash %v, want %v", got, want)
	}
}

// TestFencedInvalid: bad input is refused before anything is sent, with an
// error wrapping a sentinel.
func TestFencedInvalid(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	before := commandStats(t, c)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"zero token", b.FencedSet(ctx, "r", "v", 0, "A"), fencing.ErrInvalidToken},
		{"empty holder", b.FencedSet(ctx, "r", "v", 1, ""), driver.ErrInvalid},
		{"empty key", b.FencedSet(ctx, "", "v", 1, "A"), driver.ErrInvalid},
		{"key inside KeyPrefix", b.FencedSet(ctx, b.LockKey("orders"), "v", 1, "A"), driver.ErrInvalid},
		{"no fields", b.FencedHSet(ctx, "r", nil, 1, "A"), driver.ErrInvalid},
		{"reserved fence field", b.FencedHSet(ctx, "r", map[string]string{FenceField: "9"}, 1, "A"), driver.ErrInvalid},
		{"reserved holder field", b.FencedHSet(ctx, "r", map[string]string{HolderField: "X"}, 1, "A"), driver.ErrInvalid},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want an error wrapping %v", tc.name, tc.err, tc.want)
		} else if !strings.HasPrefix(tc.err.Error(), "redis: ") {
			t.Errorf("%s: message %q lacks the package prefix", tc.name, tc.err)
		}
	}
	after := commandStats(t, c)
	for _, cmd := range []string{"evalsha", "eval", "hset"} {
		if after[cmd] != before[cmd] {
			t.Errorf("%s sent for invalid input (%d -> %d)", cmd, before[cmd], after[cmd])
		}
	}
	if n := num(t, c, "DBSIZE"); n != 0 {
		t.Fatalf("%d keys after invalid writes", n)
	}
	b.Close()
	if err := b.FencedSet(ctx, "r", "v", 1, "A"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestFencedCorrupt: a key that is not a hash, or a fence record written by
// someone else, is reported as ErrCorrupt and left unchanged.
func TestFencedCorrupt(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	do(t, c, "SET", "str", "x")
	if err := b.FencedSet(ctx, "str", "v", 1, "A"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("string key: %v", err)
	}
	if v := str(t, c, "GET", "str"); v != "x" {
		t.Fatalf("string key changed to %q", v)
	}
	for _, rec := range [][]string{{FenceField, "abc", HolderField, "A"}, {FenceField, "007", HolderField, "A"}, {FenceField, "5"}} {
		do(t, c, "DEL", "h")
		do(t, c, append([]string{"HSET", "h", ValueField, "old"}, rec...)...)
		before := hgetall(t, c, "h")
		if err := b.FencedSet(ctx, "h", "v", 9, "A"); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("record %v: %v", rec, err)
		}
		if after := hgetall(t, c, "h"); !maps.Equal(before, after) {
			t.Fatalf("record %v: hash changed to %v", rec, after)
		}
		if _, err := b.FencedGet(ctx, "h"); rec[1] != "5" && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("FencedGet of record %v: %v", rec, err)
		}
	}
}

// TestFencedConcurrentWriters: goroutines on separate clients write with
// mixed tokens at once; the hash ends with the greatest token and the value
// written with it, and every rejection was of a token that could not win.
func TestFencedConcurrentWriters(t *testing.T) {
	srv := testserver.StartRedis(t)
	const writers, perWriter = 8, 40
	accepted, rejected := guardtest.MixedTokens(t, writers, perWriter, func(int) guardtest.Write {
		b, _ := newBackend(t, srv, Options{}) // a client per writer
		return func(tok fencing.Token, holder string) error {
			return b.FencedSet(context.Background(), "counter", tok.String(), tok, holder)
		}
	})
	_, c := newBackend(t, srv, Options{})
	h := hgetall(t, c, "counter")
	maxTok := fencing.Token(writers * perWriter)
	if h[FenceField] != maxTok.String() || h[ValueField] != maxTok.String() {
		t.Fatalf("final hash %v, want value and fence %d", h, maxTok)
	}
	if accepted+rejected != writers*perWriter || accepted == 0 {
		t.Fatalf("accepted %d rejected %d", accepted, rejected)
	}
	t.Logf("%d writes with mixed tokens: %d accepted, %d rejected; final fence %s", writers*perWriter, accepted, rejected, h[FenceField])
}

// TestFencedFailoverDuplicateFence simulates a Redis failover that lost the
// INCR of a fence counter (and the lock): the next holder is granted a fence
// EQUAL to the previous holder's. Its fenced write is rejected because the
// holder id differs, and the state written by the first holder survives.
func TestFencedFailoverDuplicateFence(t *testing.T) {
	srv := testserver.StartRedis(t)
	bA, c := newBackend(t, srv, Options{})
	bB, _ := newBackend(t, srv, Options{})
	ctx := context.Background()
	lA := mustLocker(t, bA, fencedlock.Options{TTL: 5 * time.Second})
	defer lA.Close()
	lB := mustLocker(t, bB, fencedlock.Options{TTL: 5 * time.Second})
	defer lB.Close()

	const resource = "orders-state"
	a, err := lA.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := bA.FencedSet(ctx, resource, "written by A", a.Fence(), a.Holder()); err != nil {
		t.Fatal(err)
	}
	// The failover: the new primary never saw the lock nor the INCR.
	do(t, c, "DEL", bA.LockKey("orders"))
	do(t, c, "SET", bA.FenceKey("orders"), (a.Fence() - 1).String())

	bl, err := lB.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if bl.Fence() != a.Fence() || bl.Holder() == a.Holder() {
		t.Fatalf("B got fence %d holder %s; the simulation needs fence %d from another holder", bl.Fence(), bl.Holder(), a.Fence())
	}
	err = bB.FencedSet(ctx, resource, "written by B", bl.Fence(), bl.Holder())
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Accepted != a.Fence() || se.AcceptedFrom != a.Holder() {
		t.Fatalf("B's write with the duplicated fence: %v, want a StaleError naming A", err)
	}
	rec, err := bB.FencedGet(ctx, resource)
	if err != nil || rec.Value != "written by A" || rec.Fence != a.Fence() || rec.Holder != a.Holder() {
		t.Fatalf("state after the duplicate: %+v (%v)", rec, err)
	}
	// The next grant is greater again and is accepted.
	if err := bl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := lB.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if err := bB.FencedSet(ctx, resource, "written by B", next.Fence(), next.Holder()); err != nil {
		t.Fatalf("fence %d after the duplicate: %v", next.Fence(), err)
	}
	t.Logf("duplicated fence %d: second holder rejected (%v); next fence %d accepted", a.Fence(), se, next.Fence())
}

// TestFencedWriteByHand runs the committed script with the real redis-cli,
// as its header shows.
func TestFencedWriteByHand(t *testing.T) {
	srv := testserver.StartRedis(t)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "internal", "redisscript", "fenced_write.lua")
	cli := testserver.Binary(t, "redis-cli")
	run := func(args ...string) string {
		full := append([]string{"-p", fmt.Sprint(srv.Port), "--eval", script}, args...)
		out, err := exec.Command(cli, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := run("orders", ",", "42", "holder-id", "value", "7"); out != "1" {
		t.Fatalf("accepted write printed %q", out)
	}
	if out := run("orders", ",", "41", "other", "value", "8"); !strings.Contains(out, "42") || !strings.Contains(out, "holder-id") {
		t.Fatalf("rejected write printed %q", out)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatal(err)
	}
}

// TestFencedCluster: on a 3-master Redis Cluster, fenced writes to keys in
// different slots (with and without hash tags) each run on their key's
// node, with leases taken through the same cluster client.
func TestFencedCluster(t *testing.T) {
	cl, _, b, locker := clusterBackend(t)
	ctx := context.Background()
	keys := []string{"orders", "user:{42}:profile", "{x}", "a}b{c"}
	slots := make(map[int]bool)
	for _, key := range keys {
		slots[cl.KeySlot(t, key)] = true
		l, err := locker.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.FencedSet(ctx, key, "v", l.Fence(), l.Holder()); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := b.FencedSet(ctx, key, "dup", l.Fence(), "other"); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("%s: equal token from another holder: %v", key, err)
		}
		if err := b.FencedSet(ctx, key, "newer", l.Fence()+1, "next"); err != nil {
			t.Fatalf("%s: greater token: %v", key, err)
		}
		if err := b.FencedSet(ctx, key, "stale", l.Fence(), l.Holder()); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("%s: older token: %v", key, err)
		}
		if rec, err := b.FencedGet(ctx, key); err != nil || rec.Value != "newer" || rec.Fence != l.Fence()+1 || rec.Holder != "next" {
			t.Fatalf("%s: %+v %v", key, rec, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("fenced writes on %d keys in %d slots of a 3-master cluster", len(keys), len(slots))
}

// clusterBackend starts a 3-master Redis Cluster and returns it, a client
// of it, a Backend on the client and a Locker (TTL 5s) on the Backend, all
// closed with the test (the Locker first).
func clusterBackend(t *testing.T) (*testserver.RedisCluster, rueidis.Client, *Backend, *fencedlock.Locker) {
	t.Helper()
	cl := testserver.StartRedisCluster(t, 3)
	c := cl.Client(t, nil)
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	locker := mustLocker(t, b, fencedlock.Options{TTL: 5 * time.Second})
	t.Cleanup(func() { locker.Close() })
	return cl, c, b, locker
}
