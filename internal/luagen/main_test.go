package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/internal/luacompose"
)

var write = flag.Bool("write", false, "rewrite the committed scripts in internal/redisscript")

// scriptsDir is internal/redisscript, seen from this package's directory.
var scriptsDir = filepath.Join("..", "redisscript")

// TestGenerated fails when a committed script differs from what the
// templates produce. Run go test ./internal/luagen -write to rewrite them.
func TestGenerated(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(scripts) {
		t.Fatalf("generated %d files for %d scripts", len(files), len(scripts))
	}
	if *write {
		if err := Write(scriptsDir); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(scriptsDir, name))
		if err != nil {
			t.Errorf("%s: %v (run: go test ./internal/luagen -write)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test ./internal/luagen -write (or go generate ./backend/redis)", name)
		}
	}
	// No stray generated file: every .lua in the directory is in the table.
	entries, err := os.ReadDir(scriptsDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lua") && files[e.Name()] == nil {
			t.Errorf("%s is not produced by luagen: remove it or add it to the table", e.Name())
		}
	}
}

// TestHeaderAndDocs checks that every script, as Redis runs it (composed
// from the files), starts with the generated-code header and documents each
// KEYS and ARGV entry it uses, and that it reads input only through KEYS and
// ARGV.
func TestHeaderAndDocs(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scripts {
		src, err := luacompose.Compose(s.Name+".lua", reader(files))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, "luagen:") {
			t.Errorf("%s: a marker line is left in the composed script", s.Name)
		}
		if !strings.HasPrefix(src, Header+"\n") {
			t.Errorf("%s: missing header", s.Name)
		}
		for i := range s.Keys {
			if !strings.Contains(src, "-- KEYS["+itoa(i+1)+"]: ") {
				t.Errorf("%s: KEYS[%d] not documented", s.Name, i+1)
			}
		}
		for i := range s.Args {
			if !strings.Contains(src, "-- ARGV["+itoa(i+1)+"]: ") {
				t.Errorf("%s: ARGV[%d] not documented", s.Name, i+1)
			}
		}
		code := stripComments(src)
		for i := len(s.Keys) + 1; i <= 9; i++ {
			if strings.Contains(code, "KEYS["+itoa(i)+"]") {
				t.Errorf("%s: uses undocumented KEYS[%d]", s.Name, i)
			}
		}
		for i := len(s.Args) + 1; i <= 9; i++ {
			if strings.Contains(code, "ARGV["+itoa(i)+"]") {
				t.Errorf("%s: uses undocumented ARGV[%d]", s.Name, i)
			}
		}
		if strings.Contains(code, "{{") || strings.Contains(code, "<no value>") {
			t.Errorf("%s: template residue in output", s.Name)
		}
	}
}

// TestSharedBlocksOnce checks that each shared block is written in its home
// script's file only: the others include it.
func TestSharedBlocksOnce(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for block, home := range homes {
		includes := 0
		for name, src := range files {
			has := strings.Contains(string(src), luacompose.Begin+block+"\n")
			if has != (name == home+".lua") {
				t.Errorf("%s: block %s written: %v, want only in %s.lua", name, block, has, home)
			}
			if strings.Contains(string(src), luacompose.Include+home+".lua "+block+"\n") {
				includes++
			}
		}
		if includes == 0 {
			t.Errorf("block %s is included by no script", block)
		}
	}
}

func TestDictOddArgs(t *testing.T) {
	if _, err := funcs["dict"].(func(...any) (map[string]any, error))("a"); err == nil {
		t.Fatal("dict with an odd number of arguments: no error")
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func stripComments(src string) string {
	var b strings.Builder
	for _, l := range strings.Split(src, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
