//go:build unix

package clitest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStartReady: StartReady returns the argument of the first READY
// line, stop ends the process by closing its standard input, and a
// process that exits before its READY line is an error that shows its
// standard error.
func TestStartReady(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", `echo noise; echo "READY a b"; echo "READY again"; cat >/dev/null`)
	arg, stop, err := StartReady("sh", cmd)
	if err != nil {
		t.Fatal(err)
	}
	if arg != "a b" {
		t.Errorf("arg %q, want %q", arg, "a b")
	}
	start := time.Now()
	stop()
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("after stop: %v, want an exit with code 0 (on the closed standard input)", cmd.ProcessState)
	}
	if d := time.Since(start); d >= stopTimeout {
		t.Errorf("stop took %v: the process was killed, not ended by its closed input", d)
	}

	_, _, err = StartReady("failing sh", exec.Command("/bin/sh", "-c", `echo broken >&2; exit 3`))
	if err == nil || !strings.Contains(err.Error(), "failing sh exited during start") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("err %v, want the exit during start with the log", err)
	}
}
