package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// evalBody writes ARGV[1] to the string KEYS[1] and counts the writes in
// KEYS[2]: the user's own data, in plain Redis types, behind the guard.
const evalBody = `redis.call('SET', KEYS[1], ARGV[1])
return redis.call('INCR', KEYS[2])`

// testFencedEvalRule runs fencedSteps through a FencedScript guarding the
// hash res and writing doc and count: an accepted token runs the body and
// records the token; a rejected one is a *fencing.StaleError naming the
// accepted token and holder, and changes nothing.
func testFencedEvalRule(t *testing.T, b *Backend, c rueidis.Client, res, doc, count string) {
	t.Helper()
	ctx := context.Background()
	s := b.NewFencedScript(evalBody)
	var accepted fencing.Token
	var from string
	var writes int64
	for i, st := range fencedSteps {
		value := "v" + strconv.Itoa(i)
		msg, err := s.Exec(ctx, res, st.token, st.holder, []string{doc, count}, []string{value})
		if st.accept {
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, st.why, err)
			}
			writes++
			if n, err := msg.AsInt64(); err != nil || n != writes {
				t.Fatalf("step %d (%s): body returned %v %v, want %d", i, st.why, n, err, writes)
			}
			accepted, from = st.token, st.holder
		} else {
			var se *fencing.StaleError
			if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("step %d (%s): %v, want a StaleError", i, st.why, err)
			}
			if se.Accepted != accepted || se.AcceptedFrom != from || se.Token != st.token || se.Holder != st.holder {
				t.Fatalf("step %d (%s): %+v, want accepted %d from %s", i, st.why, se, accepted, from)
			}
		}
		rec, err := b.FencedGet(ctx, res)
		if err != nil || rec.Fence != accepted || rec.Holder != from {
			t.Fatalf("step %d (%s): fence record %+v %v, want %d %s", i, st.why, rec, err, accepted, from)
		}
		if n, err := c.Do(ctx, c.B().Get().Key(count).Build()).AsInt64(); err != nil || n != writes {
			t.Fatalf("step %d (%s): %d body runs (%v), want %d", i, st.why, n, err, writes)
		}
	}
	if v, err := c.Do(ctx, c.B().Get().Key(doc).Build()).ToString(); err != nil || v != "v"+strconv.Itoa(len(fencedSteps)-1) {
		t.Fatalf("doc %q %v", v, err)
	}
}

// TestFencedEvalRule: FencedScript applies FencedSet's rule on a real
// redis-server, shares the fence record with FencedSet (a token FencedSet
// accepted rejects an older FencedScript, and the reverse), and refuses bad
// input before sending anything.
func TestFencedEvalRule(t *testing.T) {
	b, c := startBackend(t)
	testFencedEvalRule(t, b, c, "res", "doc", "count")

	ctx := context.Background()
	if err := b.FencedSet(ctx, "shared", "v", 10, "A"); err != nil {
		t.Fatal(err)
	}
	s := b.NewFencedScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
	if _, err := s.Exec(ctx, "shared", 9, "B", []string{"shared:doc"}, []string{"x"}); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("FencedScript after a newer FencedSet: %v, want ErrStale", err)
	}
	if _, err := s.Exec(ctx, "shared", 11, "B", []string{"shared:doc"}, []string{"y"}); err != nil {
		t.Fatal(err)
	}
	if err := b.FencedSet(ctx, "shared", "old", 10, "A"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("FencedSet after a newer FencedScript: %v, want ErrStale", err)
	}
	if rec, err := b.FencedGet(ctx, "shared"); err != nil || rec != (fencing.Record{Value: "v", Found: true, Fence: 11, Holder: "B"}) {
		t.Fatalf("FencedGet: %+v %v", rec, err)
	}

	// A body that fails: its error is returned (not a StaleError); the
	// token was recorded before it ran.
	bad := b.NewFencedScript(`return redis.error_reply('ERR mine')`)
	if _, err := bad.Exec(ctx, "shared", 12, "B", nil, nil); err == nil || errors.Is(err, fencing.ErrStale) || !strings.Contains(err.Error(), "mine") {
		t.Fatalf("failing body: %v", err)
	}
	if rec, _ := b.FencedGet(ctx, "shared"); rec.Fence != 12 {
		t.Fatalf("fence after a failing body: %d, want 12", rec.Fence)
	}

	// Corrupt guards run nothing.
	do(t, c, "SET", "str", "x")
	if _, err := s.Exec(ctx, "str", 1, "A", []string{"doc2"}, []string{"z"}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("guard key not a hash: %v, want ErrCorrupt", err)
	}
	do(t, c, "HSET", "forged", FenceField, "007", HolderField, "A")
	if _, err := s.Exec(ctx, "forged", 8, "A", []string{"doc2"}, []string{"z"}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("forged fence record: %v, want ErrCorrupt", err)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key("doc2").Build()).AsInt64(); n != 0 {
		t.Fatal("the body ran behind a corrupt guard")
	}

	// Invalid input: nothing is sent.
	for name, call := range map[string]func() error{
		"zero token":            func() error { _, err := s.Exec(ctx, "res", 0, "A", nil, nil); return err },
		"empty holder":          func() error { _, err := s.Exec(ctx, "res", 1, "", nil, nil); return err },
		"empty key":             func() error { _, err := s.Exec(ctx, "", 1, "A", nil, nil); return err },
		"guard in KeyPrefix":    func() error { _, err := s.Exec(ctx, DefaultKeyPrefix+"x", 1, "A", nil, nil); return err },
		"user key in KeyPrefix": func() error { _, err := s.Exec(ctx, "res", 1, "A", []string{DefaultKeyPrefix + "x"}, nil); return err },
	} {
		err := call()
		if !errors.Is(err, driver.ErrInvalid) && !errors.Is(err, fencing.ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalid or ErrInvalidToken", name, err)
		}
	}
}

// TestFencedEvalScriptChecksToken: the script itself refuses a token that
// is not a uint64 in decimal (sent by hand, past the Go checks), and runs
// nothing.
func TestFencedEvalScriptChecksToken(t *testing.T) {
	srv := testserver.StartRedis(t)
	_, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	script := fencedEvalPreamble + `return redis.call('SET', KEYS[1], 'ran')` + fencedEvalEnd
	for _, tok := range []string{"0", "-1", "01", "1.5", "18446744073709551616", "99999999999999999999", "", "x"} {
		err := c.Do(ctx, c.B().Eval().Script(script).Numkeys(2).Key("g", "d").Arg(tok, "A").Build()).Error()
		if err == nil || !strings.Contains(err.Error(), "not a fencing token") {
			t.Errorf("token %q: %v, want a refusal", tok, err)
		}
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key("d", "g").Build()).AsInt64(); n != 0 {
		t.Fatalf("%d keys written by refused tokens", n)
	}
}

// TestFencedEvalCluster: on a 3-master Redis Cluster, a FencedScript whose
// keys share a hash tag runs the rule and the body on the slot's node, for
// keys in several slots, with leases taken through the same client; keys
// in two slots are refused with ErrInvalid.
func TestFencedEvalCluster(t *testing.T) {
	cl, c, b, locker := clusterBackend(t)
	ctx := context.Background()
	slots := make(map[int]bool)
	for _, tag := range []string{"{order:1}", "{order:2}", "{user:7}", "{x}"} {
		slots[cl.KeySlot(t, tag)] = true
		testFencedEvalRule(t, b, c, tag, tag+":doc", tag+":count")
		l, err := locker.Acquire(ctx, tag+":lock")
		if err != nil {
			t.Fatal(err)
		}
		s := b.NewFencedScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
		// The rule ran with tokens up to 2^64-1 on tag: a lease's fence is stale.
		if _, err := s.Exec(ctx, tag, l.Fence(), l.Holder(), []string{tag + ":doc"}, []string{"late"}); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("%s: %v, want ErrStale", tag, err)
		}
		if _, err := s.Exec(ctx, tag+":fresh", l.Fence(), l.Holder(), []string{tag + ":doc"}, []string{"leased"}); err != nil {
			t.Fatalf("%s: %v", tag, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Keys in another slot are refused before anything is sent (rueidis
	// would panic building the command).
	s := b.NewFencedScript(`return redis.call('SET', KEYS[1], 'x')`)
	if _, err := s.Exec(ctx, "{order:1}", 1<<62, "Z", []string{"{order:2}:doc"}, nil); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("keys in two slots: %v, want ErrInvalid", err)
	}
	// rediscore.HashSlot agrees with CLUSTER KEYSLOT.
	for _, k := range []string{"", "a", "orders", "{order:1}", "{order:1}:doc", "a{}b", "a}b{c", "{}{x}", "{x", "ü {ü}"} {
		if got, want := int(rediscore.HashSlot(k)), cl.KeySlot(t, k); got != want {
			t.Fatalf("HashSlot(%q) = %d, CLUSTER KEYSLOT %d", k, got, want)
		}
	}
	t.Logf("FencedScript on %d slots of a 3-master cluster", len(slots))
}
