package pausetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/history"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment of a worker process.
const (
	envRole    = "PAUSETEST_ROLE"    // "victim" or "worker"; unset in the parent
	envBackend = "PAUSETEST_BACKEND" // backendRedis or backendPostgres
	envAddr    = "PAUSETEST_ADDR"    // the server: host:port, or a URL
	envHistory = "PAUSETEST_HISTORY"
	envLock    = "PAUSETEST_LOCK"
	envCounter = "PAUSETEST_COUNTER"
	envFenced  = "PAUSETEST_FENCED" // "1": FencedSet; "0": plain HSET
	envStop    = "PAUSETEST_STOP"   // workers stop when this file exists
	envName    = "PAUSETEST_NAME"
	envMode    = "PAUSETEST_MODE" // modeLock or modeElection
)

// The workloads: the lock's holders, or an election's leaders.
const (
	modeLock     = "lock"     // Locker.Acquire, Lease.Release
	modeElection = "election" // election.Campaign, Term.Resign
)

const (
	ttl        = 600 * time.Millisecond // lease of every worker
	pause      = 2 * ttl                // how long the victim stays stopped, at least
	workers    = 3                      // workers besides the victim
	minWrites  = 5                      // accepted writes of others the parent waits for during the pause
	maxRounds  = 2000                   // per worker, a bound
	workerTime = 25 * time.Second       // per worker, a bound
)

// TestPausedHolder runs the workload twice on one redis-server: with
// fencing (the history check must pass and the paused holder's write must
// be rejected) and without (the check must fail: the negative control).
func TestPausedHolder(t *testing.T) {
	if role := os.Getenv(envRole); role != "" {
		runWorker(t, role)
		return
	}
	srv := testserver.StartRedis(t)
	runBoth(t, backendRedis, srv.Addr, modeLock)
}

// TestPausedLeader is the seed's scenario for a leader: the workload of
// TestPausedHolder on a real redis-server with each round a term of one
// election (election.Campaign on backend/redis's driver.Elector, the
// term's fence guarding the counter, Term.Resign at the end). The victim
// is a leader stopped with SIGSTOP between its read and its write, past
// its term's lease; other campaigners win terms and write meanwhile; the
// resumed leader's write is rejected as stale, and the check passes. The
// negative control (plain HSET) must fail it.
func TestPausedLeader(t *testing.T) {
	srv := testserver.StartRedis(t)
	runBoth(t, backendRedis, srv.Addr, modeElection)
}

// TestPausedHolderPostgres is TestPausedHolder on PostgreSQL: the lock on
// backend/postgres, the counter a postgres.KV row of the same database
// (Set's guarded upsert; the negative control's plain upsert ignores
// fences). Its workers are TestPausedHolder's, told the backend by
// envBackend.
func TestPausedHolderPostgres(t *testing.T) {
	pg := testserver.StartPostgres(t)
	url := pg.URL("postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.New(ctx, pool, postgres.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.NewKV(ctx, pool, "", false); err != nil {
		t.Fatal(err)
	}
	runBoth(t, backendPostgres, url, modeLock)
}

// runBoth runs the workload of mode on the server at addr with fencing
// and without, and checks each.
func runBoth(t *testing.T, backend, addr, mode string) {
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		t.Run(name, func(t *testing.T) {
			res, victim := runWorkload(t, backend, addr, mode, name, fenced)
			t.Logf("%s: %d writes attempted, %d accepted, %d rejected; paused holder's write: %s",
				name, res.Attempted, res.Accepted, res.Rejected, victim.Kind)
			if fenced {
				if err := res.Err(); err != nil {
					t.Fatalf("with fencing the history check failed:\n%v", err)
				}
				if victim.Kind != history.Rejected || !strings.Contains(victim.Err, "stale") {
					t.Fatalf("paused holder's write: %+v, want rejected as stale", victim)
				}
				return
			}
			err := res.Err()
			if err == nil {
				t.Fatal("negative control: without fencing the history check passed; the test has no teeth")
			}
			if victim.Kind != history.Accepted || !res.Has(history.RuleStale) || !res.Has(history.RuleCounter) {
				t.Fatalf("negative control: paused holder's write %s; want it accepted and reported as a stale write and lost increments:\n%v", victim.Kind, err)
			}
			t.Logf("negative control, as required, fails the check:\n%v", err)
		})
	}
}

// runWorkload runs the victim and the workers and returns the checked
// history and the victim's write outcome.
func runWorkload(t *testing.T, backend, addr, mode, name string, fenced bool) (history.Result, history.Event) {
	dir := t.TempDir()
	histPath := filepath.Join(dir, "history")
	stopPath := filepath.Join(dir, "stop")
	lockKey, counter := "pause-"+mode+"-"+name, "counter:"+mode+":"+name
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	command := func(role, who string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestPausedHolder$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			envRole+"="+role, envBackend+"="+backend, envAddr+"="+addr, envHistory+"="+histPath, envLock+"="+lockKey,
			envCounter+"="+counter, envFenced+"="+map[bool]string{true: "1", false: "0"}[fenced],
			envStop+"="+stopPath, envName+"="+who, envMode+"="+mode)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out
	}

	// The victim: acquires first, reads, reports "in critical section" on
	// fd 3 and waits for a byte on fd 4 before writing.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	defer goW.Close()
	victim, victimOut := command("victim", "victim")
	victim.ExtraFiles = []*os.File{readyW, goR}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	readyW.Close()
	goR.Close()
	victimDone := make(chan error, 1)
	go func() { victimDone <- victim.Wait() }()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(readyR).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "in critical section" {
			t.Fatalf("victim said %q\n%s", s, victimOut)
		}
	case err := <-victimDone:
		t.Fatalf("victim exited before its critical section: %v\n%s", err, victimOut)
	case <-time.After(30 * time.Second):
		t.Fatalf("victim did not reach its critical section in 30s\n%s", victimOut)
	}

	// Stop it in the middle of its critical section.
	if err := victim.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, victim.Process.Pid, 'T')
	stoppedAt := time.Now()

	others := make([]*exec.Cmd, workers)
	outs := make([]*bytes.Buffer, workers)
	dones := make([]chan error, workers)
	for i := range others {
		others[i], outs[i] = command("worker", fmt.Sprintf("worker%d", i))
		if err := others[i].Start(); err != nil {
			t.Fatal(err)
		}
		dones[i] = make(chan error, 1)
		go func() { dones[i] <- others[i].Wait() }()
	}
	// Keep it stopped for at least the pause and until the others have
	// written: its lease is long gone, newer fences are on the counter.
	time.Sleep(pause)
	if _, ok := history.WaitAccepted(histPath, "worker", minWrites, 20*time.Second); !ok {
		t.Fatalf("workers made fewer than %d writes in 20s\n%s", minWrites, outs[0])
	}
	stopped := time.Since(stoppedAt)
	if err := victim.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-victimDone:
		if err != nil {
			t.Fatalf("victim: %v\n%s", err, victimOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("victim did not finish in 30s\n%s", victimOut)
	}
	// Let the workers go on a little after the late write, then stop them.
	time.Sleep(ttl / 2)
	if err := os.WriteFile(stopPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range others {
		select {
		case err := <-dones[i]:
			if err != nil {
				t.Fatalf("worker %d: %v\n%s", i, err, outs[i])
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("worker %d did not stop in 30s", i)
		}
	}

	// Record the final state and check the history.
	st, err := openStore(backend, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	final, err := st.read(context.Background(), counter)
	if err != nil {
		t.Fatal(err)
	}
	events, err := history.Finish(histPath, "parent", counter, final)
	if err != nil {
		t.Fatal(err)
	}
	victimWrite, ok := history.LastWrite(events, "victim")
	if !ok {
		t.Fatalf("no write outcome of the victim in the history\n%s", victimOut)
	}
	t.Logf("victim stopped for %v (TTL %v); final counter %s; %d events", stopped.Round(time.Millisecond), ttl, final, len(events))
	return history.Check(events, history.Options{Initial: "0", Counter: true}), victimWrite
}

// waitState waits (at most 5s) until process pid is in state ('T':
// stopped), as /proc/PID/stat reports it.
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not in state %c after 5s: %s", pid, state, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// worker is one process of the workload.
type worker struct {
	t       *testing.T
	st      *store
	locker  *fencedlock.Locker
	el      *election.Election // in modeElection
	rec     *history.Recorder
	lock    string
	counter string
	fenced  bool
}

func runWorker(t *testing.T, role string) {
	st, err := openStore(os.Getenv(envBackend), os.Getenv(envAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	locker := mustLocker(t, st.backend, fencedlock.Options{TTL: ttl})
	defer locker.Close()
	rec, err := history.Open(os.Getenv(envHistory), os.Getenv(envName))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	w := &worker{t: t, st: st, locker: locker, rec: rec,
		lock: os.Getenv(envLock), counter: os.Getenv(envCounter), fenced: os.Getenv(envFenced) == "1"}
	if os.Getenv(envMode) == modeElection {
		w.el, err = election.New(st.backend, fencedlock.Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer w.el.Close()
	}
	if role == "victim" {
		ready, gate := os.NewFile(3, "ready"), os.NewFile(4, "go")
		defer ready.Close()
		defer gate.Close()
		w.round(func() {
			// In the critical section, between the read and the write:
			// tell the parent, then wait for it (it stops us meanwhile).
			if _, err := ready.WriteString("in critical section\n"); err != nil {
				t.Fatal(err)
			}
			if _, err := gate.Read(make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		})
		return
	}
	stop := os.Getenv(envStop)
	start := time.Now()
	for i := 0; i < maxRounds && time.Since(start) < workerTime; i++ {
		if _, err := os.Stat(stop); err == nil {
			return
		}
		w.round(func() { time.Sleep(time.Duration(1+i%3) * time.Millisecond) })
	}
}

// round is one read-modify-write of the counter under the lock: acquire,
// read, between(), write counter+1 (fenced or not), release. Every step is
// recorded, the outcome before the release.
func (w *worker) round(between func()) {
	t := w.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := w.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := history.Event{Key: w.counter, Fence: l.Fence(), Holder: l.Holder()}
	w.record(ev, history.Acquire, "")
	cur, err := w.st.read(ctx, w.counter)
	if err != nil {
		t.Fatal(err)
	}
	ev.Value = cur
	w.record(ev, history.Read, "")
	between()
	n, err := strconv.Atoi(cur)
	if err != nil {
		t.Fatalf("counter %q: %v", cur, err)
	}
	ev.Value, ev.RMW, ev.Base = strconv.Itoa(n+1), true, cur
	w.record(ev, history.Attempt, "")
	// A worker resumed from SIGSTOP may find its connection dropped (the
	// client's timers all fired at once) and its first request failing
	// with a network error. Retrying with the same fence is what a real
	// client does, and it is safe: the guard's rule makes the retry
	// idempotent. A stale rejection is final.
	for try := 1; ; try++ {
		if w.fenced {
			err = w.st.fencedWrite(ctx, w.counter, ev.Value, l.Fence(), l.Holder())
		} else {
			err = w.st.plainWrite(ctx, w.counter, ev.Value)
		}
		if err == nil || errors.Is(err, fencing.ErrStale) || try == 5 || ctx.Err() != nil {
			break
		}
		t.Logf("write attempt %d failed, retrying: %v", try, err)
		time.Sleep(50 * time.Millisecond)
	}
	switch {
	case err == nil:
		w.record(ev, history.Accepted, "")
	case errors.Is(err, fencing.ErrStale):
		w.record(ev, history.Rejected, err.Error())
	default:
		t.Fatal(err)
	}
	// A lease lost during a pause is no longer held: ErrNotHeld is expected.
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		t.Fatal(err)
	}
}

// acquire takes the round's lease: the lock's, or a term's of the
// election named by the lock key (whose Resign is its Lease's Release).
func (w *worker) acquire(ctx context.Context) (*fencedlock.Lease, error) {
	if w.el == nil {
		return w.locker.Acquire(ctx, w.lock)
	}
	term, err := w.el.Campaign(ctx, w.lock, []byte(os.Getenv(envName)))
	if err != nil {
		return nil, err
	}
	return term.Lease, nil
}

func (w *worker) record(ev history.Event, kind history.Kind, msg string) {
	ev.Kind, ev.Err = kind, msg
	if err := w.rec.Record(ev); err != nil {
		w.t.Fatal(err)
	}
}
