package luacompose

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// files is a small layout: lib.lua holds the blocks, nested; use.lua
// includes them; loop.lua includes itself.
var files = map[string]string{
	"lib.lua":  "a = 1\n" + Begin + "outer\n" + "b = 2\n" + Begin + "inner\n" + "c = 3\n" + End + "inner\n" + End + "outer\n" + "d = 4\n",
	"use.lua":  "x = 0\n" + Include + "lib.lua inner (a note)\n" + "y = 0\n" + Include + "lib.lua outer\n",
	"loop.lua": Begin + "self\n" + Include + "loop.lua self\n" + End + "self\n" + Include + "loop.lua self\n",
	"bad.lua":  Include + "lib.lua\n",
	"none.lua": Include + "lib.lua missing\n",
}

func read(name string) (string, error) {
	s, ok := files[name]
	if !ok {
		return "", fs.ErrNotExist
	}
	return s, nil
}

func TestCompose(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"lib.lua", "a = 1\nb = 2\nc = 3\nd = 4\n"},
		{"use.lua", "x = 0\nc = 3\ny = 0\nb = 2\nc = 3\n"},
	} {
		got, err := Compose(tc.name, read)
		if err != nil || got != tc.want {
			t.Errorf("Compose(%s) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if got := Strip(files["lib.lua"]); got != "a = 1\nb = 2\nc = 3\nd = 4\n" {
		t.Errorf("Strip(lib.lua) = %q", got)
	}
}

func TestComposeErrors(t *testing.T) {
	for name, want := range map[string]string{
		"loop.lua":   "nested deeper",
		"bad.lua":    "malformed",
		"none.lua":   "no block missing",
		"absent.lua": "file does not exist",
	} {
		_, err := Compose(name, read)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compose(%s) = %v, want an error with %q", name, err, want)
		}
		if name == "absent.lua" && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Compose(absent.lua) = %v, want fs.ErrNotExist wrapped", err)
		}
	}
}
