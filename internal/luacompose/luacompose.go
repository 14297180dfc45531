// Package luacompose composes the Lua scripts of internal/redisscript from
// their committed files. Code shared by several scripts (the fence counter
// functions, the fair queue's helpers, the fence record of a guarded hash)
// is written once, in one script's file, between two marker lines:
//
//	-- luagen:begin fence_funcs
//	...
//	-- luagen:end fence_funcs
//
// and every other script that needs it holds one line in its place:
//
//	-- luagen:include release.lua fence_funcs
//
// [Compose] replaces each include line by the lines of that block and drops
// every marker line, so that the script Redis runs is the text the
// templates of internal/luagen render, byte for byte. internal/luagen
// writes the files (and checks that they compose back to its rendering);
// internal/redisscript composes them at init. The markers are Lua comments:
// a file that includes nothing runs by hand as it is.
package luacompose

import (
	"fmt"
	"strings"
)

// Marker prefixes, each on a line of its own.
const (
	Begin   = "-- luagen:begin "   // Begin + block name opens a shared block
	End     = "-- luagen:end "     // End + block name closes it
	Include = "-- luagen:include " // Include + file + " " + block stands for that block
)

// maxDepth bounds nested includes (a block that includes another).
const maxDepth = 4

// Reader returns the committed text of a script file by its name, such as
// "release.lua".
type Reader func(name string) (string, error)

// Compose returns the script of file name: its text with each include line
// replaced by the block it names (composed in turn) and every marker line
// dropped.
func Compose(name string, read Reader) (string, error) {
	return compose(name, "", read, 0)
}

// compose returns the lines of block in file, or the whole file when block
// is empty, composed.
func compose(file, block string, read Reader, depth int) (string, error) {
	if depth > maxDepth {
		return "", fmt.Errorf("luacompose: %s: includes nested deeper than %d", file, maxDepth)
	}
	src, err := read(file)
	if err != nil {
		return "", fmt.Errorf("luacompose: %w", err)
	}
	var b strings.Builder
	in := block == ""
	for _, line := range strings.SplitAfter(src, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case block != "" && t == Begin+block:
			in = true
			continue
		case block != "" && t == End+block && in:
			return b.String(), nil
		case strings.HasPrefix(t, Begin), strings.HasPrefix(t, End), !in:
			continue
		}
		inc, ok := strings.CutPrefix(t, Include)
		if !ok {
			b.WriteString(line)
			continue
		}
		f := strings.Fields(inc)
		if len(f) < 2 {
			return "", fmt.Errorf("luacompose: %s: malformed line %q", file, t)
		}
		s, err := compose(f[0], f[1], read, depth+1)
		if err != nil {
			return "", fmt.Errorf("luacompose: %s: %w", file, err)
		}
		b.WriteString(s)
	}
	if block != "" {
		return "", fmt.Errorf("luacompose: %s has no block %s (or it is not closed)", file, block)
	}
	return b.String(), nil
}

// Strip returns src without its marker lines: the text a script whose
// blocks are all its own composes to.
func Strip(src string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, Begin) && !strings.HasPrefix(t, End) {
			b.WriteString(line)
		}
	}
	return b.String()
}
