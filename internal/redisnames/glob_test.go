package redisnames

import "testing"

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"":                        "",
		"fencedlock:{a}":          "fencedlock:{a}",
		`p*:{k?[x]\y}`:            `p\*:{k\?\[x\]\\y}`,
		"fencedlock:{ü%7B}:queue": "fencedlock:{ü%7B}:queue",
	} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
