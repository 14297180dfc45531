package clitest

import (
	"bytes"
	"os"
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
	// The trap first: a SIGTERM sent as soon as the pid file appears
	// must find it set (else sh dies of the signal and records nothing).
	return `trap 'date +%s%N > ` + dir + `/term; exit 0' TERM; echo $$ > ` + dir + `/pid; while :; do sleep 0.05; done`
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

// TermRecorded is WaitUnixNanos for a command that may have been killed
// before it could record SIGTERM: it waits at most timeout for path to
// hold a complete line and returns the time in it and true, or the zero
// time and false if there is none (an empty or partial file, as a SIGKILL
// during the write leaves, counts as none). It fails the test if a
// complete line is not a time in Unix nanoseconds.
func TermRecorded(t *testing.T, path string, timeout time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		b, err := os.ReadFile(path)
		if err == nil && bytes.HasSuffix(b, []byte("\n")) {
			return WaitUnixNanos(t, path, time.Second), true
		}
		if time.Now().After(deadline) || i > 100000 {
			return time.Time{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
