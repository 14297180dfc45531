package rediscore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// TestConcat: keys that fit the command's buffer are built there, longer
// ones are allocated; both are the concatenation.
func TestConcat(t *testing.T) {
	var buf [8]byte
	for _, parts := range [][]string{{}, {""}, {"ab", "", "cd"}, {"abcd", "efgh"}, {"abcd", "efghi"}, {strings.Repeat("x", 100)}} {
		want := strings.Join(parts, "")
		if got := concat(buf[:], parts...); got != want {
			t.Errorf("concat(%q) = %q, want %q", parts, got, want)
		}
	}
}

// TestCallNames: the names of a Call are the lock key and lock key +
// suffix, for keys that fit its buffer and keys that do not.
func TestCallNames(t *testing.T) {
	b := NewBackend(nil, redisscript.Options{KeyPrefix: "p:"}, nil)
	for _, key := range []string{"k", "a{b}%", strings.Repeat("long%", 100)} {
		lk := redisscript.LockKey("p:", key)
		want := [4]string{lk, lk + redisnames.FenceSuffix, lk + redisnames.AbandonedSuffix, lk + redisnames.QueueSuffix}
		if got := b.newCall(key).names; got != want {
			t.Errorf("key %.20q: names %q, want %q", key, got, want)
		}
	}
}

// TestCallAllocs: a Call of a short key is one allocation, names
// included.
func TestCallAllocs(t *testing.T) {
	b := NewBackend(nil, redisscript.Options{KeyPrefix: redisscript.DefaultKeyPrefix}, nil)
	if n := testing.AllocsPerRun(100, func() { b.newCall("orders/42") }); n != 1 {
		t.Errorf("newCall allocates %.1f times, want 1", n)
	}
}

// TestCallReuse: a Grant's Call is used again by the next command of the
// lease only when it was made by the same backend for the same key, no
// other command uses it, and its last command got a reply; its owner
// token is cleared after each command.
func TestCallReuse(t *testing.T) {
	b := NewBackend(nil, redisscript.Options{KeyPrefix: "p:"}, nil)
	other := NewBackend(nil, redisscript.Options{KeyPrefix: "q:"}, nil)
	c := b.newCall("k")
	g := driver.Grant{Key: "k", Owner: "secret", Data: c}
	if got := other.callFor(&g); got == c {
		t.Fatal("another backend used the Grant's Call")
	}
	moved := g
	moved.Key = "other"
	if got := b.callFor(&moved); got == c || got.names[0] != "p:{other}" {
		t.Fatalf("a Grant of another key used names %q", got.names[0])
	}
	first := b.callFor(&g)
	if first != c {
		t.Fatal("the Grant's free Call was not used")
	}
	first.args[0] = g.Owner
	if second := b.callFor(&g); second == c {
		t.Fatal("a Call in use was used by a second command")
	}
	first.done(nil)
	if c.args[0] != "" || strings.Contains(fmt.Sprintf("%v %+v %#v", g, g, g), "secret") {
		t.Fatal("the Call kept the owner token after its command")
	}
	if b.callFor(&g) != c {
		t.Fatal("the Call was not used again after a reply")
	}
	c.done(errors.New("no reply"))
	if b.callFor(&g) == c {
		t.Fatal("a Call whose command got no reply was used again")
	}
}
