package clitest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TermScript returns a /bin/sh command (for sh -c) that writes its pid to
// dir/pid, then runs until it gets SIGTERM, on which it writes the time in
// Unix nanoseconds to dir/term and exits 0: the command a test runs under a
// lock whose lease it then takes away.
func TermScript(dir string) string {
	return `echo $$ > ` + dir + `/pid; trap 'date +%s%N > ` + dir + `/term; exit 0' TERM; while :; do sleep 0.05; done`
}

// WaitUnixNanos waits at most timeout, as WaitFile, for path to hold a
// time in Unix nanoseconds (as TermScript writes it) and returns it; it
// fails the test if the file holds anything else.
func WaitUnixNanos(t *testing.T, path string, timeout time.Duration) time.Time {
	t.Helper()
	s := WaitFile(t, path, timeout)
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("timestamp %q in %s: %v", s, path, err)
	}
	return time.Unix(0, n)
}
