//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/fencedlock/fencedlock"
)

const demoHeader = `Usage: fencedlock demo [flags]

Show, with real processes, why a lock needs a fencing token:

  1. worker A acquires the lock and checks that it holds it;
  2. the demo stops A with SIGSTOP (a GC pause, a VM stall) past its lease;
  3. the lease expires on the server; worker B acquires with a higher fence
     and writes to the fenced resource;
  4. the demo resumes A with SIGCONT; A writes with its old fence and the
     server REJECTS it; A's release deletes nothing (B still holds the lock).

With no backend flag the lock server is an embedded Redis (miniredis) on a
loopback port, whose key expiry the demo drives in real time. --redis or
--etcd runs the same against a real server.

The fenced resource lives on the same server as the lock, as it would in
your code: on Redis a hash written with (*redis.Backend).FencedSet, whose
script checks the fence and writes in one step; on etcd a key written with
(*etcd.Backend).FencedPut, one transaction. The workers write it directly;
the server alone decides from the fence in each write, and the demo reads
the result back (FencedGet) for its verdict. The demo deletes the resource
key when it starts (on etcd the fence record of an earlier run stays; it is
older than any fence of the new run) and leaves it at the end, to be looked at.
Owner tokens are never printed, only holder ids.

The exit code is 0 only if the outcome was the safe one; otherwise 1 (69 if
the server cannot be used). --no-fencing makes the workers write with a plain
HSET (Redis) or Put (etcd), which ignores fences, so A's late write
overwrites B's: the unsafe outcome, exit 1.
`

const demoFooter = backendHelp + `
Examples:
  go run ./cmd/fencedlock demo
  go run ./cmd/fencedlock demo --no-fencing    # the same pause without fencing: corrupted, exit 1
  fencedlock demo --redis redis://default:secret@127.0.0.1:6379 --ttl 2s
  fencedlock demo --etcd http://127.0.0.1:2379

` + demoExitCodes

type demoFlags struct {
	backend  backendConfig
	ttl      time.Duration
	key      string
	resource string
	unfenced bool
}

func (e *env) demo(ctx context.Context, args []string) int {
	var f demoFlags
	fs := e.newFlagSet("demo", demoHeader, demoFooter)
	addBackendFlags(fs, &f.backend)
	fs.DurationVar(&f.ttl, "ttl", time.Second, "the workers' lease `duration`; A is paused past it")
	fs.StringVar(&f.key, "lock", "demo:orders", "the lock `name` the workers compete for")
	fs.StringVar(&f.resource, "resource", "", "the `key` of the fenced resource on the server, outside the key prefix (default: the lock name + \":resource\")")
	fs.BoolVar(&f.unfenced, "no-fencing", false, "write the resource without the fence check (plain HSET / Put), to see the late write corrupt it (the demo then exits 1)")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError("demo", "unexpected arguments %q", fs.Args())
	}
	if err := fencedlock.ValidateKey(f.key); err != nil {
		return e.usageError("demo", "%v", err)
	}
	if f.resource == "" {
		f.resource = f.key + ":resource"
	}
	if f.ttl < 100*time.Millisecond || f.ttl > time.Minute {
		return e.usageError("demo", "--ttl %v out of range [100ms, 1m]", f.ttl)
	}
	if c := f.backend; c.redisURL == "" && c.etcd == "" && (c.cacert != "" || c.cert != "" || c.key != "" || c.user != "" || c.password != "") {
		return e.usageError("demo", "--cacert, --cert, --key, --user and --password need --etcd ENDPOINTS")
	}
	d := &demo{e: e, f: f, tl: newTimeline(e.stdout)}
	defer d.cleanup()
	defer d.tl.close()
	if err := d.setup(ctx); err != nil {
		return e.openError("demo", err)
	}
	if err := d.play(ctx); err != nil {
		d.tl.say("demo", "FAILED: %v", err)
		d.tl.close()
		fmt.Fprintf(e.stderr, "fencedlock demo: the scenario did not complete: %v\n", err)
		return exitFailure
	}
	d.tl.close()
	return d.verdict()
}

// demo is one run of the scenario.
type demo struct {
	e  *env
	f  demoFlags
	tl *timeline

	mini     *miniredis.Miniredis
	stopTick chan struct{}
	tickDone chan struct{}
	backend  fencedlock.Backend
	res      demoResource
	closeB   func()
	workers  []*demoWorker

	// Outcome, filled in by play.
	a, b       workerEvent // acquired events
	aWrite     workerEvent
	bWrite     workerEvent
	stillHeldB bool
	final      resourceState // read back from the server at the end
}

// setup starts the embedded server if needed and the demo's own
// connection, which inspects the lock and resets and reads the resource.
func (d *demo) setup(ctx context.Context) error {
	cfg := &d.f.backend
	if cfg.redisURL == "" && cfg.etcd == "" {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("starting the embedded Redis: %w", err)
		}
		d.mini = m
		d.driveExpiry()
		cfg.redisURL = "redis://" + m.Addr()
		d.tl.say("demo", "embedded Redis (miniredis) on %s, key expiry driven in real time", m.Addr())
	} else {
		// Only flags choose the demo's server: never a stray environment.
		if err := cfg.resolve(func(string) string { return "" }); err != nil {
			return err
		}
		d.tl.say("demo", "lock server: %s", cfg.describe())
	}
	b, res, closeB, err := openDemo(ctx, *cfg, d.f.resource, d.f.unfenced)
	if err != nil {
		return err
	}
	d.backend, d.res, d.closeB = b, res, closeB
	rctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	if err := res.reset(rctx); err != nil {
		return fmt.Errorf("clearing the resource: %w", err)
	}
	if d.f.unfenced {
		d.tl.say("demo", "UNFENCED resource: %s", res.describe())
	} else {
		d.tl.say("demo", "fenced resource: %s", res.describe())
		d.tl.say("demo", "the server applies a write only if its fence is above the highest accepted, or equal from the same holder")
	}
	return nil
}

// driveExpiry makes miniredis expire keys in real time: miniredis only
// counts TTLs down when told to, so a ticker tells it how much time has
// passed. Keys expire at most one tick late, which only delays a waiter.
func (d *demo) driveExpiry() {
	d.stopTick, d.tickDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d.tickDone)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-d.stopTick:
				return
			case now := <-t.C:
				// Monotonic difference: wall-clock jumps do not matter.
				d.mini.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
}

func (d *demo) cleanup() {
	for _, w := range d.workers {
		w.kill()
	}
	if d.closeB != nil {
		d.closeB()
	}
	if d.mini != nil {
		close(d.stopTick)
		<-d.tickDone
		d.mini.Close()
	}
}

// play runs the scenario; it returns an error if it could not be played
// to its end (the verdict judges the outcome).
func (d *demo) play(ctx context.Context) error {
	ttl := d.f.ttl
	step := 5*ttl + 10*time.Second // bound on any single step
	A, err := d.startWorker("A", rolePaused)
	if err != nil {
		return err
	}
	if d.a, err = A.expect("acquired", step); err != nil {
		return err
	}
	if _, err := A.expect("checked", step); err != nil {
		return err
	}
	if err := syscall.Kill(A.pid(), syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP to A: %w", err)
	}
	A.stopped = true
	d.tl.say("demo", "SIGSTOP A (pid %d) between its check and its write; it will stay stopped past its %v lease", A.pid(), ttl)
	if state, ok := procState(A.pid(), time.Second); ok && state == "T" {
		d.tl.say("demo", "A's process state is %q (stopped): no renewals from now on", state)
	} else if ok {
		return fmt.Errorf("process state of A is %q after SIGSTOP, not stopped (T)", state)
	}

	B, err := d.startWorker("B", roleWriter)
	if err != nil {
		return err
	}
	if d.b, err = B.expect("acquired", step); err != nil {
		return err
	}
	if d.bWrite, err = B.expect("write", step); err != nil {
		return err
	}

	if err := syscall.Kill(A.pid(), syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT to A: %w", err)
	}
	A.stopped = false
	d.tl.say("demo", "SIGCONT A: it resumes where it stopped, and writes with its old fence %d", d.a.Fence)
	if err := A.send("go"); err != nil {
		return err
	}
	if d.aWrite, err = A.expect("write", step); err != nil {
		return err
	}
	if _, err := A.expect("lease", step); err != nil {
		return err
	}
	if _, err := A.expect("released", step); err != nil {
		return err
	}
	if err := A.wait(step); err != nil {
		return err
	}

	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	info, err := d.backend.(fencedlock.Inspector).Inspect(ictx, d.f.key)
	cancel()
	if err != nil {
		return fmt.Errorf("inspecting %q: %w", d.f.key, err)
	}
	d.stillHeldB = info.Held && info.Holder == d.b.Holder
	if d.stillHeldB {
		d.tl.say("demo", "%q is still held by B (holder %s, fence %v): A's late release deleted nothing", d.f.key, info.Holder, info.Fence)
	} else {
		d.tl.say("demo", "after A's release, %q is held=%v by holder %q: B's lock was NOT left alone", d.f.key, info.Held, info.Holder)
	}

	if err := B.send("release"); err != nil {
		return err
	}
	if _, err := B.expect("released", step); err != nil {
		return err
	}
	if err := B.wait(step); err != nil {
		return err
	}

	rctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	if d.final, err = d.res.read(rctx); err != nil {
		return fmt.Errorf("reading the resource back: %w", err)
	}
	return nil
}

// verdict prints the outcome and returns the exit code.
func (d *demo) verdict() int {
	s := d.final
	w := d.e.stdout
	accepted := 0
	for _, ev := range []workerEvent{d.aWrite, d.bWrite} {
		if ev.OK {
			accepted++
		}
	}
	value := "(none)"
	if s.ok {
		value = strconv.Quote(s.value)
	}
	if d.f.unfenced {
		// Plain writes leave no fence record (an etcd one from an
		// earlier fenced run may remain, and would mislead).
		fmt.Fprintf(w, "\nresource: %s, read back from the server; no fence checked; %d of 2 writes accepted\n", value, accepted)
	} else {
		fmt.Fprintf(w, "\nresource: %s, fence %v (holder %s), read back from the server; %d of 2 writes accepted\n", value, s.fence, s.holder, accepted)
	}
	var problems []string
	if d.b.Fence <= d.a.Fence {
		problems = append(problems, fmt.Sprintf("B's fence %d is not greater than A's %d", d.b.Fence, d.a.Fence))
	}
	if !d.bWrite.OK {
		problems = append(problems, "B's write was not accepted: "+d.bWrite.Detail)
	}
	if d.aWrite.OK {
		problems = append(problems, "A's late write with the stale fence was ACCEPTED: the resource was corrupted")
	} else if !d.aWrite.Stale {
		problems = append(problems, "A's write failed for another reason than a stale fence: "+d.aWrite.Detail)
	}
	switch {
	case !s.ok || s.value != d.bWrite.Value:
		problems = append(problems, fmt.Sprintf("the resource holds %s, not B's write", value))
	case !d.f.unfenced && (uint64(s.fence) != d.b.Fence || s.holder != d.b.Holder):
		problems = append(problems, fmt.Sprintf("the resource's fence record is %v from holder %s, not B's", s.fence, s.holder))
	}
	if !d.stillHeldB {
		problems = append(problems, "A's late release did not leave B's lock alone")
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "outcome: UNSAFE\n  - %s\n", strings.Join(problems, "\n  - "))
		if d.f.unfenced {
			fmt.Fprintf(w, "This is what --no-fencing shows: a lock alone cannot stop a paused holder's late write.\n")
		}
		return exitFailure
	}
	fmt.Fprintf(w, "outcome: SAFE. A was paused past its lease and woke up still believing it held the lock;\n"+
		"its write carried fence %d, older than B's %d, and the server rejected it.\n", d.a.Fence, d.b.Fence)
	return exitOK
}

// timeline prints events with the time since the demo started, in the
// order they happened: events come from several processes and goroutines,
// so each is held for reorderWindow and printed sorted by its time stamp.
type timeline struct {
	mu      sync.Mutex
	w       io.Writer
	start   time.Time
	seq     int
	pending []timelineEntry
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

type timelineEntry struct {
	at   time.Time
	seq  int
	line string
}

// reorderWindow is how long an event waits for earlier ones to arrive.
const reorderWindow = 25 * time.Millisecond

func newTimeline(w io.Writer) *timeline {
	t := &timeline{w: w, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
				t.emit(false)
			}
		}
	}()
	return t
}

func (t *timeline) say(who, format string, args ...any) {
	t.sayAt(time.Now(), who, format, args...)
}

func (t *timeline) sayAt(at time.Time, who, format string, args ...any) {
	line := fmt.Sprintf("+%7.3fs  %-8s  %s\n", at.Sub(t.start).Seconds(), who, fmt.Sprintf(format, args...))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		fmt.Fprint(t.w, line)
		return
	}
	t.seq++
	t.pending = append(t.pending, timelineEntry{at: at, seq: t.seq, line: line})
}

// emit prints the pending events older than reorderWindow (all of them if
// all is set), oldest first.
func (t *timeline) emit(all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sort.Slice(t.pending, func(i, j int) bool {
		a, b := t.pending[i], t.pending[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.seq < b.seq
	})
	n := 0
	for _, e := range t.pending {
		if !all && time.Since(e.at) < reorderWindow {
			break
		}
		fmt.Fprint(t.w, e.line)
		n++
	}
	t.pending = append(t.pending[:0], t.pending[n:]...)
}

// close prints every pending event; later events are printed at once.
// It is idempotent.
func (t *timeline) close() {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return
	}
	close(t.stop)
	<-t.done
	t.emit(true)
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// demoWorker is one worker process of the demo.
type demoWorker struct {
	d       *demo
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	events  chan stampedEvent // closed when the worker's output ends
	exited  chan struct{}
	waitErr error
	stopped bool
}

type stampedEvent struct {
	at time.Time
	ev workerEvent
}

func (d *demo) startWorker(name, role string) (*demoWorker, error) {
	self, err := d.e.self()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to start worker %s: %w", name, err)
	}
	cmd := exec.Command(self, workerCommand,
		"-role", role, "-name", name, "-lock", d.f.key, "-resource", d.f.resource,
		"-no-fencing="+strconv.FormatBool(d.f.unfenced),
		"-ttl", d.f.ttl.String(), "-limit", (20*d.f.ttl + 30*time.Second).String())
	cmd.Env = workerEnv(os.Environ(), d.f.backend)
	cmd.Stderr = d.e.stderr
	cmd.SysProcAttr = childSysProcAttr()
	w := &demoWorker{d: d, name: name, cmd: cmd, events: make(chan stampedEvent, 64), exited: make(chan struct{})}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	d.workers = append(d.workers, w)
	d.tl.say("demo", "started worker %s (pid %d)", name, cmd.Process.Pid)
	go func() {
		defer close(w.exited)
		defer close(w.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev workerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = workerEvent{Ev: "error", Detail: "unreadable report: " + sc.Text()}
			}
			at := time.Now()
			if ev.At != 0 {
				at = time.Unix(0, ev.At) // when the worker reported it
			}
			if ev.Ev == "write" {
				d.tl.sayAt(at, "resource", "%s", describeWrite(ev, d.f.unfenced))
			}
			d.tl.sayAt(at, name, "%s", describeEvent(ev))
			w.events <- stampedEvent{time.Now(), ev}
		}
		// Wait only after the output is drained (exec.Cmd's rule).
		w.waitErr = cmd.Wait()
	}()
	return w, nil
}

func (w *demoWorker) pid() int { return w.cmd.Process.Pid }

// workerEnv is the environment of a worker: ours without any FENCEDLOCK_
// variable, plus the backend the demo uses.
func workerEnv(environ []string, c backendConfig) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "FENCEDLOCK_") {
			out = append(out, kv)
		}
	}
	add := func(name, v string) {
		if v != "" {
			out = append(out, name+"="+v)
		}
	}
	add("FENCEDLOCK_REDIS", c.redisURL)
	add("FENCEDLOCK_ETCD", c.etcd)
	add("FENCEDLOCK_ETCD_CACERT", c.cacert)
	add("FENCEDLOCK_ETCD_CERT", c.cert)
	add("FENCEDLOCK_ETCD_KEY", c.key)
	add("FENCEDLOCK_ETCD_USER", c.user)
	add("FENCEDLOCK_ETCD_PASSWORD", c.password)
	add("FENCEDLOCK_KEY_PREFIX", c.keyPrefix)
	return out
}

// expect waits up to timeout for the worker's next event, which must be
// of kind ev.
// A "waiting" event before it is skipped (it is on the timeline already).
func (w *demoWorker) expect(ev string, timeout time.Duration) (workerEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case se, ok := <-w.events:
			if !ok {
				<-w.exited
				return workerEvent{}, fmt.Errorf("worker %s ended (%v) while the demo waited for %q", w.name, w.waitErr, ev)
			}
			if se.ev.Ev == "waiting" && ev != "waiting" {
				continue
			}
			if se.ev.Ev != ev {
				return se.ev, fmt.Errorf("worker %s reported %q (%s) while the demo waited for %q", w.name, se.ev.Ev, se.ev.Detail, ev)
			}
			return se.ev, nil
		case <-t.C:
			return workerEvent{}, fmt.Errorf("worker %s did not report %q within %v", w.name, ev, timeout)
		}
	}
}

// send writes one command line to the worker.
func (w *demoWorker) send(cmd string) error {
	if _, err := io.WriteString(w.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("telling worker %s %q: %w", w.name, cmd, err)
	}
	return nil
}

// wait waits for the worker to exit and checks that it succeeded.
func (w *demoWorker) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case se, ok := <-w.events:
			if ok {
				return fmt.Errorf("worker %s reported %q (%s) unexpectedly", w.name, se.ev.Ev, se.ev.Detail)
			}
			<-w.exited
			if w.waitErr != nil {
				return fmt.Errorf("worker %s failed: %w", w.name, w.waitErr)
			}
			return nil
		case <-t.C:
			return fmt.Errorf("worker %s did not exit within %v", w.name, timeout)
		}
	}
}

// kill ends a worker that is still running (after a failure), resuming it
// first if it is stopped, and waits for it.
func (w *demoWorker) kill() {
	select {
	case <-w.exited:
		return
	default:
	}
	_ = w.stdin.Close()
	if w.stopped {
		_ = syscall.Kill(w.pid(), syscall.SIGCONT)
	}
	_ = w.cmd.Process.Kill()
	go func() {
		for range w.events {
		}
	}()
	select {
	case <-w.exited:
	case <-time.After(5 * time.Second):
	}
}

// describeEvent renders a worker's report for the timeline.
func describeEvent(ev workerEvent) string {
	switch ev.Ev {
	case "waiting":
		switch {
		case ev.Holder != "" && ev.TTLms > 0:
			return fmt.Sprintf("lock is held by holder %s (fence %d), lease ends in %v: waiting", ev.Holder, ev.Fence, roundDuration(time.Duration(ev.TTLms)*time.Millisecond))
		case ev.Holder != "":
			return fmt.Sprintf("lock is held by holder %s (fence %d): waiting", ev.Holder, ev.Fence)
		}
		return "lock is held: waiting"
	case "acquired":
		return fmt.Sprintf("acquired the lock: fence %d, holder %s, lease %v", ev.Fence, ev.Holder, time.Duration(ev.TTLms)*time.Millisecond)
	case "checked":
		return "checked its lease before writing: " + ev.Detail
	case "write":
		if ev.OK {
			return fmt.Sprintf("wrote %q with fence %d: accepted", ev.Value, ev.Fence)
		}
		if ev.Stale {
			return fmt.Sprintf("wrote %q with fence %d: REJECTED by the server as stale", ev.Value, ev.Fence)
		}
		return fmt.Sprintf("wrote %q with fence %d: FAILED (%s)", ev.Value, ev.Fence, ev.Detail)
	case "lease":
		if ev.OK {
			return "its lease is " + ev.Detail
		}
		return "its watchdog reports the lease lost: " + ev.Detail
	case "released":
		if ev.OK {
			return "released the lock"
		}
		return "release deleted nothing: " + ev.Detail
	case "error":
		return "ERROR: " + ev.Detail
	}
	return fmt.Sprintf("%s %s", ev.Ev, ev.Detail)
}

// describeWrite renders, for the resource's line of the timeline, what the
// server did with a worker's write.
func describeWrite(ev workerEvent, unfenced bool) string {
	switch {
	case ev.OK && unfenced:
		return fmt.Sprintf("applied %q, a plain write: its fence %d (holder %s) was never checked", ev.Value, ev.Fence, ev.Holder)
	case ev.OK:
		return fmt.Sprintf("accepted %q with fence %d (holder %s)", ev.Value, ev.Fence, ev.Holder)
	case ev.Stale:
		return fmt.Sprintf("REJECTED %q with fence %d (holder %s): %s", ev.Value, ev.Fence, ev.Holder, ev.Detail)
	}
	return fmt.Sprintf("did not take %q with fence %d (holder %s): %s", ev.Value, ev.Fence, ev.Holder, ev.Detail)
}
