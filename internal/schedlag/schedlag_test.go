//go:build unix

package schedlag

import (
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// stop is how long stopFor holds the test process up.
const stop = 200 * time.Millisecond

// stopFor stops the whole test process for at least d (SIGSTOP, then
// SIGCONT d later, both sent by a child shell: a stopped process sends
// nothing) and returns once the child has resumed it. Every goroutine is
// held up alike, as on a machine too loaded to run the process.
func stopFor(t *testing.T, d time.Duration) {
	t.Helper()
	script := fmt.Sprintf("kill -STOP $PPID; sleep %.3f; kill -CONT $PPID", d.Seconds())
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v: %s", script, err, out)
	}
}

// TestMonitorMeasuresStop: a stop of the process lies within one of the
// monitor's measured intervals (each runs from one wake-up to the next),
// so the lateness it reports covers the stop less one Tick, whenever in
// the monitor's loop the stop came. Half the stop is asserted (the
// signal reaches the process's threads a little after kill returns); a
// loaded machine can only make the lateness larger.
func TestMonitorMeasuresStop(t *testing.T) {
	m := Start()
	defer m.Stop()
	stopFor(t, stop)
	if late := m.Settled(time.Second); late < stop/2 {
		t.Fatalf("Settled after a stop of %v: %v, want at least %v", stop, late, stop/2)
	}
	if late, settled := m.Max(), m.Settled(time.Second); late != settled {
		t.Fatalf("Max %v, Settled %v: both are the largest lateness so far", late, settled)
	}
}

// TestMonitorWindow: Window reports the largest lateness since
// StartWindow (the stop in it), and StartWindow forgets the window's
// peak but not Max.
func TestMonitorWindow(t *testing.T) {
	m := Start()
	defer m.Stop()
	m.StartWindow()
	stopFor(t, stop)
	if late := m.Window(); late < stop/2 {
		t.Fatalf("Window with a stop of %v in it: %v, want at least %v", stop, late, stop/2)
	}
	m.Stop()
	m.StartWindow() // and nothing measured since: the window is empty
	if late := m.Window(); late != 0 {
		t.Fatalf("Window of a monitor stopped right after StartWindow: %v, want 0", late)
	}
	if late := m.Max(); late < stop/2 {
		t.Fatalf("Max after StartWindow: %v, want the stop's lateness (at least %v) kept", late, stop/2)
	}
}

// TestMonitorStopped: a stopped monitor measures nothing more, and
// Settled returns at once instead of waiting out its bound (an hour:
// the test would time out) for measurements that will not come; Stop
// may be called again.
func TestMonitorStopped(t *testing.T) {
	m := Start()
	m.Stop()
	late := m.Max()
	if got := m.Settled(time.Hour); got != late {
		t.Fatalf("Settled of a stopped monitor: %v, want Max %v", got, late)
	}
	m.Stop()
}
