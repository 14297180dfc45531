//go:build unix

// Package demo is the scenario of "fencedlock demo": two worker processes
// of the fencedlock binary compete for one lock, the demo pauses the first
// (SIGSTOP) past its lease between its check and its write, the second
// acquires with a higher fence and writes, and the first resumes and
// writes late with its old fence. The fenced resource lives on the lock's
// own server (a Redis hash written with FencedSet, or an etcd key written
// with FencedPut), so the server alone decides; the demo reads the result
// back for its verdict.
//
// The command owns the flags and the connection (see [Config] and
// [Server]); this package owns the story: the scenario ([Run]), the
// worker processes ([Worker]), the resource (resource.go) and the
// timeline that prints it in order (timeline.go).
package demo

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// Exit codes of the demo and its workers, the command's own (see its
// package documentation).
const (
	exitOK          = 0
	exitFailure     = 1 // the outcome was unsafe, or the scenario failed
	exitUsage       = 64
	exitBackend     = 69
	exitNotAcquired = 75
)

// stepTimeout bounds one Inspect or one read of the resource.
const stepTimeout = 2 * time.Second

// Server is the lock server the demo and its workers use. Exactly one of
// DialRedis and DialEtcd is set.
type Server struct {
	// Name describes the server for the timeline, without credentials.
	Name string
	// Env holds the FENCEDLOCK_ variables that name the server. A worker's
	// environment is the demo's without any FENCEDLOCK_ variable, plus Env.
	Env []string
	// DialRedis connects to a Redis server: the client (which writes the
	// resource when unfenced) and the lock backend on it.
	DialRedis func() (rueidis.Client, *redisb.Backend, error)
	// DialEtcd connects to an etcd cluster, as DialRedis does.
	DialEtcd func(ctx context.Context) (*clientv3.Client, *etcdb.Backend, error)
}

// Config is one run of the demo.
type Config struct {
	TTL      time.Duration // the workers' lease; worker A is paused past it
	Lock     string        // the lock the workers compete for
	Resource string        // the fenced resource's key, outside the backend's key prefix
	Unfenced bool          // workers write with a plain HSET / Put (--no-fencing)

	// Embedded runs the scenario on an embedded miniredis, whose key
	// expiry the demo drives in real time.
	Embedded bool
	// Server returns the server to play on. With Embedded, embeddedURL is
	// the redis:// URL of the embedded server; otherwise it is "".
	Server func(embeddedURL string) (Server, error)

	// Self returns the path of the executable to start workers from, and
	// WorkerArgs the arguments before the worker's own that make it run
	// [Worker].
	Self       func() (string, error)
	WorkerArgs []string

	Stdout io.Writer // the timeline and the verdict
	Stderr io.Writer // the workers' standard error
}

// Run plays the scenario and returns the exit code: 0 if the outcome was
// safe, 1 if it was not or the scenario could not be played to its end.
// It returns an error, and no code, if the server could not be set up;
// an error wrapping [driver.ErrInvalid] is the caller's usage error.
func Run(ctx context.Context, cfg Config) (int, error) {
	d := &demo{cfg: cfg, tl: newTimeline(cfg.Stdout)}
	defer d.cleanup()
	defer d.tl.close()
	if err := d.setup(ctx); err != nil {
		return 0, err
	}
	if err := d.play(ctx); err != nil {
		d.tl.say("demo", "FAILED: %v", err)
		d.tl.close()
		fmt.Fprintf(cfg.Stderr, "fencedlock demo: the scenario did not complete: %v\n", err)
		return exitFailure, nil
	}
	d.tl.close()
	return d.verdict(), nil
}

// demo is one run of the scenario.
type demo struct {
	cfg Config
	tl  *timeline

	mini     *miniredis.Miniredis
	stopTick chan struct{}
	tickDone chan struct{}
	server   Server
	backend  driver.Backend
	res      *resource
	closeB   func()
	workers  []*workerProc

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
	embeddedURL := ""
	if d.cfg.Embedded {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("starting the embedded Redis: %w", err)
		}
		d.mini = m
		d.driveExpiry()
		embeddedURL = "redis://" + m.Addr()
		d.tl.say("demo", "embedded Redis (miniredis) on %s, key expiry driven in real time", m.Addr())
	}
	s, err := d.cfg.Server(embeddedURL)
	if err != nil {
		return err
	}
	d.server = s
	if !d.cfg.Embedded {
		d.tl.say("demo", "lock server: %s", s.Name)
	}
	b, res, closeB, err := open(ctx, s, d.cfg.Resource, d.cfg.Unfenced)
	if err != nil {
		return err
	}
	d.backend, d.res, d.closeB = b, res, closeB
	rctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := res.reset(rctx); err != nil {
		return fmt.Errorf("clearing the resource: %w", err)
	}
	if d.cfg.Unfenced {
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
	step := 5*d.cfg.TTL + 10*time.Second // bound on any single step
	A, err := d.stopA(step)
	if err != nil {
		return err
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
	if err := d.resumeA(A, step); err != nil {
		return err
	}
	if err := d.inspectB(ctx); err != nil {
		return err
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

	rctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if d.final, err = d.res.read(rctx); err != nil {
		return fmt.Errorf("reading the resource back: %w", err)
	}
	return nil
}

// stopA starts worker A, lets it take the lock and check its lease, and
// stops it (SIGSTOP) before its write, each step within step.
func (d *demo) stopA(step time.Duration) (*workerProc, error) {
	A, err := d.startWorker("A", rolePaused)
	if err != nil {
		return nil, err
	}
	if d.a, err = A.expect("acquired", step); err != nil {
		return nil, err
	}
	if _, err := A.expect("checked", step); err != nil {
		return nil, err
	}
	if err := syscall.Kill(A.pid(), syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("SIGSTOP to A: %w", err)
	}
	A.stopped = true
	d.tl.say("demo", "SIGSTOP A (pid %d) between its check and its write; it will stay stopped past its %v lease", A.pid(), d.cfg.TTL)
	if state, ok := procState(A.pid(), time.Second); ok && state == "T" {
		d.tl.say("demo", "A's process state is %q (stopped): no renewals from now on", state)
	} else if ok {
		return nil, fmt.Errorf("process state of A is %q after SIGSTOP, not stopped (T)", state)
	}
	return A, nil
}

// resumeA lets A go on (SIGCONT) with its late write and release, and
// waits for it to exit.
func (d *demo) resumeA(A *workerProc, step time.Duration) error {
	if err := syscall.Kill(A.pid(), syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT to A: %w", err)
	}
	A.stopped = false
	d.tl.say("demo", "SIGCONT A: it resumes where it stopped, and writes with its old fence %d", d.a.Fence)
	if err := A.send("go"); err != nil {
		return err
	}
	var err error
	if d.aWrite, err = A.expect("write", step); err != nil {
		return err
	}
	if _, err := A.expect("lease", step); err != nil {
		return err
	}
	if _, err := A.expect("released", step); err != nil {
		return err
	}
	return A.wait(step)
}

// inspectB records whether B still holds the lock after A's late
// release.
func (d *demo) inspectB(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, stepTimeout)
	info, err := d.backend.(driver.Inspector).Inspect(ictx, d.cfg.Lock)
	cancel()
	if err != nil {
		return fmt.Errorf("inspecting %q: %w", d.cfg.Lock, err)
	}
	d.stillHeldB = info.Held && info.Holder == d.b.Holder
	if d.stillHeldB {
		d.tl.say("demo", "%q is still held by B (holder %s, fence %v): A's late release deleted nothing", d.cfg.Lock, info.Holder, info.Fence)
	} else {
		d.tl.say("demo", "after A's release, %q is held=%v by holder %q: B's lock was NOT left alone", d.cfg.Lock, info.Held, info.Holder)
	}
	return nil
}

// verdict prints the outcome and returns the exit code.
func (d *demo) verdict() int {
	s := d.final
	w := d.cfg.Stdout
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
	if d.cfg.Unfenced {
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
	case !d.cfg.Unfenced && (uint64(s.fence) != d.b.Fence || s.holder != d.b.Holder):
		problems = append(problems, fmt.Sprintf("the resource's fence record is %v from holder %s, not B's", s.fence, s.holder))
	}
	if !d.stillHeldB {
		problems = append(problems, "A's late release did not leave B's lock alone")
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "outcome: UNSAFE\n  - %s\n", strings.Join(problems, "\n  - "))
		if d.cfg.Unfenced {
			fmt.Fprintf(w, "This is what --no-fencing shows: a lock alone cannot stop a paused holder's late write.\n")
		}
		return exitFailure
	}
	fmt.Fprintf(w, "outcome: SAFE. A was paused past its lease and woke up still believing it held the lock;\n"+
		"its write carried fence %d, older than B's %d, and the server rejected it.\n", d.a.Fence, d.b.Fence)
	return exitOK
}
