// What the report reads from its environment (load, commit, module versions) and the files it writes.

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// saveRaw writes the raw benchmark output to path, creating its directory.
func saveRaw(path string, raw []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("saving raw output: %w", err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("saving raw output: %w", err)
	}
	return nil
}

// loadavg returns the 1, 5 and 15 minute load averages, if the system
// tells.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// describeCommit names the commit of the repository the benchmarks ran on,
// noting uncommitted changes outside bench/.
func describeCommit() string {
	out, err := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	desc := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		desc += " plus uncommitted changes"
	}
	return desc
}

// moduleVersions reads the require lines of a go.mod.
func moduleVersions(path string) map[string]string {
	m := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && strings.HasPrefix(f[1], "v") {
			m[f[0]] = f[1]
		}
	}
	return m
}

// replaceSection replaces the text between the markers of path with md
// (which carries the markers), or appends md if the markers are missing.
func replaceSection(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	s := string(old)
	i := strings.Index(s, "<!-- report:begin")
	j := strings.Index(s, endMarker)
	if i >= 0 && j > i {
		s = s[:i] + strings.TrimSuffix(md, "\n") + s[j+len(endMarker):]
	} else {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + md
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
