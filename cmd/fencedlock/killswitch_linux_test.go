//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// switchRuns is the number of runs of each case of the kill-switch tests
// below (issue 27, issue 28 item 1). The suite runs 2; the figures in
// docs/cli-run.md come from -switch-runs=20 on a loaded machine.
var switchRuns = flag.Int("switch-runs", 2, "runs of each case of TestKillSwitch* and TestRunLateGrant")

// switchRig is what every case of the kill-switch tests shares: a redis
// server, its URL and a poller (a second holder, in the test process).
type switchRig struct {
	srv    *testserver.Redis
	url    string
	poller *fencedlock.Locker
}

func newSwitchRig(t *testing.T) *switchRig {
	t.Helper()
	srv, url := redisServer(t)
	b, err := redisb.New(srv.Client(t, nil), redisb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	poller := mustLocker(t, b, fencedlock.Options{TTL: 5 * time.Second})
	t.Cleanup(func() { _ = poller.Close() })
	return &switchRig{srv: srv, url: url, poller: poller}
}

// switchRun is one `fencedlock run` of these tests, started with exec
// directly: its standard error may be a pipe that nobody reads.
type switchRun struct {
	cmd    *exec.Cmd
	stderr *clitest.SyncBuffer // nil when undrained
	done   chan struct{}
}

// startSwitchRun starts path (the fencedlock binary, or a wrapper that
// execs it: prefix) with args. With undrained, its standard error is a
// pipe that is never read (a log shipper that is down, a stuck tee).
func startSwitchRun(t *testing.T, env []string, undrained bool, argv ...string) *switchRun {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEDLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	r := &switchRun{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	if undrained {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = pw
		t.Cleanup(func() { pr.Close() })
		defer pw.Close()
	} else {
		r.stderr = new(clitest.SyncBuffer)
		cmd.Stderr = r.stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
			select {
			case <-r.done:
			case <-time.After(10 * time.Second):
			}
		}
	})
	return r
}

func (r *switchRun) stderrText() string {
	if r.stderr == nil {
		return "(undrained)"
	}
	return r.stderr.String()
}

// waitLines waits at most 10s until path, written by COMMAND of run,
// holds n lines, and returns true; false if run exited first with 76 (on
// a loaded machine the switch may fire by itself: the tree was killed,
// which the caller still checks, but the event it was to cause did not
// happen).
func waitLines(t *testing.T, run *switchRun, path string, n int) bool {
	t.Helper()
	for i := 0; i < 2000; i++ {
		b, _ := os.ReadFile(path)
		if strings.Count(string(b), "\n") >= n {
			return true
		}
		select {
		case <-run.done:
			if run.cmd.ProcessState.ExitCode() == exitLeaseLost {
				t.Logf("%s: fencedlock exited 76 before COMMAND wrote %d lines (the switch fired by itself); stderr:\n%s", path, n, run.stderrText())
				return false
			}
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
	state := "still running"
	select {
	case <-run.done:
		state = "exited: " + run.cmd.ProcessState.String()
	default:
	}
	t.Fatalf("%s: fewer than %d lines after 10s; fencedlock %s; stderr:\n%s", path, n, state, run.stderrText())
	return false
}

// acquireAfter makes the poller try KEY every 5ms from start on, 15s at
// most, and returns when its successful attempt began and the lease.
func (r *switchRig) acquireAfter(t *testing.T, key string, start time.Time) (time.Time, *fencedlock.Lease) {
	t.Helper()
	time.Sleep(time.Until(start))
	for j := 0; j < 3000; j++ {
		began := time.Now()
		l, err := r.poller.TryAcquire(context.Background(), key)
		if err == nil {
			return began, l
		}
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("poller: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the poller did not acquire %q within 15s", key)
	return time.Time{}, nil
}

// switchFigures sums up the runs of one case: the largest overlap (a
// process of the first tree alive after the second holder's successful
// attempt began), when the first tree's last process was first seen dead
// relative to the event (a forced release, a kill), and the gap from then
// to the second holder's attempt.
type switchFigures struct {
	n, early                           int // early: the switch fired before the event
	overlap                            time.Duration
	deathMin, deathMax, gapMin, gapMax time.Duration
}

// add records a run; early says the switch fired before the event (its
// overlap counts, its times do not).
func (f *switchFigures) add(early bool, overlap time.Duration, event, dead, acq time.Time) {
	f.overlap = max(f.overlap, overlap)
	if early {
		f.early++
		return
	}
	death, gap := dead.Sub(event), acq.Sub(dead)
	if f.n == 0 {
		f.deathMin, f.deathMax, f.gapMin, f.gapMax = death, death, gap, gap
	}
	f.n++
	f.deathMin, f.deathMax = min(f.deathMin, death), max(f.deathMax, death)
	f.gapMin, f.gapMax = min(f.gapMin, gap), max(f.gapMax, gap)
}

func (f *switchFigures) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%d runs (and %d ended by the switch before the event): largest time a process of the first tree was alive after a second holder acquired: %v; its last process died %v to %v after the event; the second holder acquired %v to %v after that",
		f.n, f.early, f.overlap, r(f.deathMin), r(f.deathMax), r(f.gapMin), r(f.gapMax))
}

// checkNoOverlap fails the test if a process of the first tree (watched
// by w) was alive when the poller's successful attempt began, or at any
// time after it (the watcher looks for 200ms more). It returns how long a
// process was seen alive after that (0: none), and when the tree's last
// process was first seen dead.
func checkNoOverlap(t *testing.T, w *treeWatch, run *switchRun, what string, acq time.Time) (time.Duration, time.Time) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	w.close()
	seen, alive, lastAlive, deadAt := w.state()
	if seen == 0 {
		t.Fatalf("%s: no process of the first tree was seen", what)
	}
	if alive > 0 || lastAlive.After(acq) {
		t.Errorf("%s: %d processes of the first tree alive when a second holder acquired (seen alive %v after its attempt began); first run's stderr:\n%s",
			what, alive, lastAlive.Sub(acq).Round(time.Millisecond), run.stderrText())
		return max(lastAlive.Sub(acq), time.Nanosecond), deadAt
	}
	return 0, deadAt
}

// writerLoop is a shell loop appending the date to path every 100ms.
func writerLoop(path string) string {
	return `while :; do date +%s%N >> ` + path + `; sleep 0.1; done`
}

// TestKillSwitchUndrainedStderr (issue 27 item 1): fencedlock's standard
// error, which the supervisor and COMMAND share, is a pipe nobody reads,
// and COMMAND fills it. The kill switch must fire anyway: a diagnostic
// line never delays a signal. "forced release": `release --force` breaks
// the lock; the first run must notice at its next renewal and kill its
// tree, which must be gone by the lease's latest local deadline (the
// force + TTL), when the second holder acquires. "fencedlock SIGKILLed":
// the second holder acquires when the lease expires on the server; no
// process of the first tree may be alive then.
func TestKillSwitchUndrainedStderr(t *testing.T) {
	rig := newSwitchRig(t)
	const ttl, grace = 2 * time.Second, 300 * time.Millisecond
	for _, mode := range []string{"forced release", "fencedlock SIGKILLed"} {
		t.Run(mode, func(t *testing.T) {
			var fig switchFigures
			for i := 0; i < *switchRuns && !t.Failed(); i++ {
				key := treeKey("stderr-%s-%d", strings.Fields(mode)[1], i)
				dir := t.TempDir()
				w := watchTree(t, key)
				run := startSwitchRun(t, []string{"FENCEDLOCK_REDIS=" + rig.url}, true,
					bin.Path, "run", "--ttl", ttl.String(), "--grace", grace.String(), key, "--", "/bin/sh", "-c",
					`(`+writerLoop(dir+"/f")+`) & head -c 300000 /dev/zero >&2; wait`)
				t.Cleanup(w.killAll)
				early := !waitLines(t, run, dir+"/f", 3)
				var start time.Time
				event := time.Now()
				switch {
				case early:
				case mode == "forced release":
					code, p := bin.Run(t, []string{"FENCEDLOCK_REDIS=" + rig.url}, "release", "--force", key)
					if code != exitOK {
						t.Fatalf("release --force: exit %d; stderr:\n%s", code, p.Stderr)
					}
					// The first lease's local deadline is at most the
					// force + TTL: its last renewal came before.
					start = time.Now().Add(ttl)
				default:
					if err := run.cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
				}
				acq, lease := rig.acquireAfter(t, key, start)
				overlap, dead := checkNoOverlap(t, w, run, fmt.Sprintf("run %d (%s)", i, mode), acq)
				fig.add(early, overlap, event, dead, acq)
				_ = lease.Release(context.Background())
			}
			t.Logf("%s, %s", mode, &fig)
		})
	}
}

// TestKillSwitchSupervisorKilled (issue 27 item 2): COMMAND starts a
// setsid writer (a new session and process group) and then kills its
// parent, the supervisor, with SIGKILL. fencedlock must not release the
// lock while the writer runs: it finds and kills what is left of the tree
// itself. A second holder polls all along; when it acquires, no process
// of the first tree may be alive.
func TestKillSwitchSupervisorKilled(t *testing.T) {
	rig := newSwitchRig(t)
	var fig switchFigures
	for i := 0; i < *switchRuns && !t.Failed(); i++ {
		key := treeKey("supkill-setsid-%d", i)
		dir := t.TempDir()
		w := watchTree(t, key)
		run := startSwitchRun(t, []string{"FENCEDLOCK_REDIS=" + rig.url}, false,
			bin.Path, "run", "--ttl", "2s", "--grace", "300ms", key, "--", "/bin/sh", "-c",
			`setsid /bin/sh -c '`+writerLoop(dir+"/f")+`' & while [ ! -s `+dir+`/f ]; do sleep 0.01; done; kill -9 $PPID; wait`)
		t.Cleanup(w.killAll)
		early := !waitLines(t, run, dir+"/f", 1)
		event := time.Now() // COMMAND kills the supervisor right after the first write
		acq, lease := rig.acquireAfter(t, key, event)
		overlap, dead := checkNoOverlap(t, w, run, fmt.Sprintf("run %d", i), acq)
		fig.add(early, overlap, event, dead, acq)
		_ = lease.Release(context.Background())
		select {
		case <-run.done:
			if code := run.cmd.ProcessState.ExitCode(); code != exitLeaseLost {
				t.Errorf("run %d: exit %d, want %d; stderr:\n%s", i, code, exitLeaseLost, run.stderrText())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("run %d: fencedlock still running 10s after the second holder acquired; stderr:\n%s", i, run.stderrText())
		}
	}
	t.Logf("%s", &fig)
}

// TestKillSwitchUnsignallable (issue 27 item 3): a descendant of COMMAND
// runs as another user (as `sudo -u other` makes it), so fencedlock and
// its supervisor, running as a plain user, cannot signal it (EPERM). The
// kill must be reported, and the tree counts as not gone: the lock is kept
// while that process runs. fencedlock runs as uid 1000, with CAP_SETUID
// and CAP_SETGID as ambient capabilities (setpriv) so that COMMAND can
// start the descendant as nobody (65534) without a setuid binary; it has
// no CAP_KILL. The descendant writes for about 3s and exits.
// "supervisor killed": COMMAND then kills the supervisor (SIGKILL);
// "COMMAND exits": COMMAND exits and leaves it running.
func TestKillSwitchUnsignallable(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run a process as another user: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("this test runs fencedlock and a descendant as two other users: it must run as root (euid %d)", os.Geteuid())
	}
	rig := newSwitchRig(t)
	// A copy of the binary and a work directory that uid 1000 and nobody
	// can reach (the test's own temporary directories are root's, 0700).
	pub, err := os.MkdirTemp("", "fencedlock-eperm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(pub, "fencedlock")
	b, err := os.ReadFile(bin.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(self, b, 0o755); err != nil {
		t.Fatal(err)
	}
	asUser := []string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups",
		"--inh-caps=+setuid,+setgid", "--ambient-caps=+setuid,+setgid", self}
	for _, mode := range []string{"supervisor killed", "COMMAND exits"} {
		t.Run(mode, func(t *testing.T) {
			var fig switchFigures
			for i := 0; i < *switchRuns && !t.Failed(); i++ {
				key := treeKey("eperm-%s-%d", strings.Fields(mode)[1], i)
				dir, err := os.MkdirTemp(pub, "run")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, 0o777); err != nil {
					t.Fatal(err)
				}
				end := `kill -9 $PPID; wait`
				if mode == "COMMAND exits" {
					end = `exit 0`
				}
				w := watchTree(t, key)
				run := startSwitchRun(t, []string{"FENCEDLOCK_REDIS=" + rig.url}, false,
					append(asUser, "run", "--ttl", "2s", "--grace", "300ms", key, "--", "/bin/sh", "-c",
						`setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh -c 'i=0; while [ $i -lt 30 ]; do date +%s%N >> `+dir+`/f; sleep 0.1; i=$((i+1)); done' &
						while [ ! -s `+dir+`/f ]; do sleep 0.01; done; `+end)...)
				t.Cleanup(w.killAll)
				early := !waitLines(t, run, dir+"/f", 1)
				event := time.Now() // the writer's first write; it writes for about 3s
				acq, lease := rig.acquireAfter(t, key, event)
				overlap, dead := checkNoOverlap(t, w, run, fmt.Sprintf("run %d (%s)", i, mode), acq)
				fig.add(early, overlap, event, dead, acq)
				_ = lease.Release(context.Background())
				select {
				case <-run.done:
				case <-time.After(10 * time.Second):
					t.Fatalf("run %d: fencedlock still running 10s after the second holder acquired; stderr:\n%s", i, run.stderrText())
				}
				if i == 0 {
					t.Logf("run 0 (%s): stderr:\n%s", mode, run.stderrText())
				}
				if !early && !strings.Contains(run.stderrText(), "operation not permitted") {
					t.Errorf("run %d (%s): the kill that failed (EPERM) is not reported; stderr:\n%s", i, mode, run.stderrText())
				}
			}
			t.Logf("%s, %s", mode, &fig)
		})
	}
}

// TestRunLateGrant (issue 28 item 1): through a proxy that delays the
// server's replies by 350ms, a --ttl 200ms lease is granted by the server
// and already past its local deadline when the reply arrives; a second
// holder (polling the server directly) acquires in between. run must not
// start COMMAND on such a grant: it releases it and counts it as not
// acquired (--try: exit 75; --wait: goes on waiting, here until --wait
// runs out). COMMAND records its start; it must never start.
func TestRunLateGrant(t *testing.T) {
	rig := newSwitchRig(t)
	proxy, err := faultproxy.New(rig.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.SetReplyLatency(350 * time.Millisecond)
	proxied := "redis://locker:s3cret@" + proxy.Addr()
	client := rig.srv.Client(t, nil)
	for _, mode := range []string{"--try", "--wait"} {
		t.Run(mode, func(t *testing.T) {
			starts := 0
			for i := 0; i < *switchRuns; i++ {
				key := fmt.Sprintf("late-%s-%d", strings.TrimPrefix(mode, "--"), i)
				dir := t.TempDir()
				args := []string{"run", "--ttl", "200ms", "--try", key, "--", "/bin/sh", "-c", `date +%s%N > ` + dir + `/started`}
				if mode == "--wait" {
					args[3] = "--wait=1500ms"
				}
				run := startSwitchRun(t, []string{"FENCEDLOCK_REDIS=" + proxied}, false, append([]string{bin.Path}, args...)...)
				// The second holder: once the first run's grant is on the
				// server, try every 5ms.
				for j := 0; ; j++ {
					n, err := client.Do(context.Background(), client.B().Exists().Key(lockKey(key)).Build()).AsInt64()
					if err != nil {
						t.Fatal(err)
					}
					if n == 1 {
						break
					}
					if j == 10000 {
						t.Fatalf("run %d: the first run's grant never reached the server; stderr:\n%s", i, run.stderrText())
					}
					time.Sleep(time.Millisecond)
				}
				acq, lease := rig.acquireAfter(t, key, time.Now())
				select {
				case <-run.done:
				case <-time.After(20 * time.Second):
					t.Fatalf("run %d: still running after 20s; stderr:\n%s", i, run.stderrText())
				}
				code := run.cmd.ProcessState.ExitCode()
				_ = lease.Release(context.Background())
				if b, err := os.ReadFile(dir + "/started"); err == nil {
					starts++
					when := "(its time not written: killed first)"
					if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
						when = time.Unix(0, ns).Sub(acq).Round(time.Millisecond).String() + " after the second holder's successful attempt began"
					}
					t.Errorf("run %d (%s): COMMAND started %s; exit %d; stderr:\n%s", i, mode, when, code, run.stderrText())
					continue
				}
				if code != exitNotAcquired {
					t.Errorf("run %d (%s): exit %d, want %d (not acquired); stderr:\n%s", i, mode, code, exitNotAcquired, run.stderrText())
				}
				if i == 0 {
					t.Logf("%s: exit %d; stderr:\n%s", mode, code, run.stderrText())
				}
			}
			t.Logf("%s, %d runs: %d COMMAND starts", mode, *switchRuns, starts)
		})
	}
}
