package main

import (
	"strings"
	"testing"
)

const renewLua = `-- GET fails with WRONGTYPE if the lock key is not a string.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0`

// TestMutants checks each operator on a small script, and that comments
// are never mutated.
func TestMutants(t *testing.T) {
	got := map[string]bool{}
	for _, m := range Mutants("renew.lua", renewLua) {
		if m.Line == 1 {
			t.Errorf("a comment was mutated: %+v", m)
		}
		got[m.Op+": "+m.To] = true
		if m.src == renewLua {
			t.Errorf("mutant %+v leaves the script as it was", m)
		}
	}
	for _, want := range []string{
		"flip: if redis.call('GET', KEYS[1]) ~= ARGV[1] then",
		"cond: if true then",
		"expiry: ",
		"swap: redis.call('DEL', KEYS[2]) / redis.call('PEXPIRE', KEYS[1], ARGV[2])",
	} {
		if !got[want] {
			t.Errorf("no mutant %q; got %v", want, got)
		}
	}
}

// TestCodeSkipsQuotedDashes checks that a "--" inside a string is not
// taken for a comment.
func TestCodeSkipsQuotedDashes(t *testing.T) {
	if c := code(`x = '--' -- note`); strings.TrimSpace(c) != `x = '--'` {
		t.Errorf("code() = %q", c)
	}
}
