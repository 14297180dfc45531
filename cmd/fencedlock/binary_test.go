//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// binPath is the fencedlock binary built once by TestMain; the tests below
// run it as users do, against real redis-server processes.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencedlock-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "fencedlock")
	build := exec.Command("go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building fencedlock: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockKey is the Redis key of the lock named key with the default prefix.
func lockKey(key string) string { return "fencedlock:{" + key + "}" }

// redisServer starts a redis-server with an ACL user and returns it with
// the URL the binary is given (user:password form).
func redisServer(t *testing.T) (*redistest.Server, string) {
	t.Helper()
	s := redistest.Start(t, redistest.WithUser("locker", "s3cret"))
	return s, "redis://locker:s3cret@" + s.Addr
}

// proc is one run of the binary.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdout  *syncBuffer
	stderr  *syncBuffer
	started time.Time
	done    chan struct{}
	ended   time.Time
}

// start runs the binary with args; env adds variables to a clean
// environment (no FENCEDLOCK_ variable from the test's own).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEDLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{t: t, cmd: cmd, stdout: new(syncBuffer), stderr: new(syncBuffer), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting fencedlock: %v", err)
	}
	p.started = time.Now()
	go func() {
		_ = cmd.Wait()
		p.ended = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its children, if any share its group
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits (bounded) for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("fencedlock %q still running after %v; stderr:\n%s", p.cmd.Args[1:], timeout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// runBin runs the binary to completion (bounded) and returns its exit code.
func runBin(t *testing.T, env []string, args ...string) (int, *proc) {
	t.Helper()
	p := start(t, env, args...)
	return p.wait(60 * time.Second), p
}

// waitFile waits (bounded) until path exists and is not empty, and returns
// its content.
func waitFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
			return string(b)
		}
		if time.Now().After(deadline) || i > 100000 {
			t.Fatalf("%s not written within %v", path, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func unixNanos(t *testing.T, s string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("timestamp %q: %v", s, err)
	}
	return time.Unix(0, n)
}

// TestRunNeverOverlaps runs several `fencedlock run` processes on one key
// at once; their commands log start and end times, which must form
// disjoint intervals with increasing fences.
func TestRunNeverOverlaps(t *testing.T) {
	_, url := redisServer(t)
	log := filepath.Join(t.TempDir(), "log")
	const procs, rounds = 4, 2
	script := `echo "start $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log + `; sleep 0.1; echo "end $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log
	var wg sync.WaitGroup
	codes := make(chan string, procs*rounds)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				code, p := runBin(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "-q", "--ttl", "1s", "--wait", "30s", "shared", "--", "/bin/sh", "-c", script)
				if code != 0 {
					codes <- fmt.Sprintf("exit %d: %s", code, p.stderr)
				}
			}
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		t.Error(c)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	type span struct {
		fence      int
		start, end int64
	}
	spans := map[int]*span{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var kind string
		var fence int
		var ns int64
		if _, err := fmt.Sscan(line, &kind, &fence, &ns); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		s := spans[fence]
		if s == nil {
			s = &span{fence: fence}
			spans[fence] = s
		}
		if kind == "start" {
			s.start = ns
		} else {
			s.end = ns
		}
	}
	if len(spans) != procs*rounds {
		t.Fatalf("%d distinct fences in the log, want %d (one per run):\n%s", len(spans), procs*rounds, b)
	}
	list := make([]*span, 0, len(spans))
	for _, s := range spans {
		if s.start == 0 || s.end == 0 {
			t.Fatalf("fence %d: incomplete interval", s.fence)
		}
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
	var gaps []time.Duration
	for i := 1; i < len(list); i++ {
		prev, cur := list[i-1], list[i]
		if cur.start < prev.end {
			t.Errorf("overlap: fence %d ran [%d, %d], fence %d started at %d", prev.fence, prev.start, prev.end, cur.fence, cur.start)
		}
		if cur.fence <= prev.fence {
			t.Errorf("fence %d ran after fence %d", cur.fence, prev.fence)
		}
		gaps = append(gaps, time.Duration(cur.start-prev.end))
	}
	t.Logf("%d runs by %d processes, no overlap; hand-off gaps (end of one command to start of the next): %v", len(list), procs, gaps)
}

// lostLeaseScript is a command that records its pid and, on SIGTERM, the
// time it got it.
func lostLeaseScript(dir string) string {
	return `echo $$ > ` + dir + `/pid; trap 'date +%s%N > ` + dir + `/term; exit 0' TERM; while :; do sleep 0.05; done`
}

// TestLeaseLostTerminatesCommand loses the lease of a running command in
// the two ways a server can take it away, and measures the time from the
// loss to the command's termination, which must be within TTL plus grace.
func TestLeaseLostTerminatesCommand(t *testing.T) {
	const ttl, grace = time.Second, 3 * time.Second
	for _, how := range []string{"key deleted", "server killed"} {
		t.Run(how, func(t *testing.T) {
			srv, url := redisServer(t)
			dir := t.TempDir()
			p := start(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "--ttl", ttl.String(), "--grace", grace.String(), "job", "--", "/bin/sh", "-c", lostLeaseScript(dir))
			waitFile(t, dir+"/pid", 10*time.Second)
			time.Sleep(2 * ttl) // renewals keep the lease past its TTL
			if p.stderr.String() != "" && strings.Contains(p.stderr.String(), "lost") {
				t.Fatalf("lease lost under a healthy server:\n%s", p.stderr)
			}
			var lostAt time.Time
			switch how {
			case "key deleted":
				client := srv.Client(t, nil)
				lostAt = time.Now()
				n, err := client.Do(context.Background(), client.B().Del().Key(lockKey("job")).Build()).AsInt64()
				if err != nil || n != 1 {
					t.Fatalf("DEL %s: %d, %v", lockKey("job"), n, err)
				}
			case "server killed":
				lostAt = time.Now()
				srv.Kill()
			}
			code := p.wait(ttl + grace + 10*time.Second)
			termAt := unixNanos(t, waitFile(t, dir+"/term", time.Second))
			toTerm, toExit := termAt.Sub(lostAt), p.ended.Sub(lostAt)
			t.Logf("%s: SIGTERM reached the command %v after the loss; fencedlock exited %v after it (TTL %v, grace %v)", how, toTerm, toExit, ttl, grace)
			t.Logf("stderr:\n%s", p.stderr)
			if code != exitLeaseLost {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, p.stderr)
			}
			if toTerm > ttl+grace {
				t.Errorf("the command was terminated %v after the loss, more than TTL+grace %v", toTerm, ttl+grace)
			}
			if !strings.Contains(p.stderr.String(), `lease on "job" lost`) || !strings.Contains(p.stderr.String(), "sending SIGTERM") {
				t.Errorf("stderr does not explain the loss:\n%s", p.stderr)
			}
		})
	}
}

// TestCommandIgnoringSIGTERMIsKilled: after a lost lease, a command that
// ignores SIGTERM (and its children) get SIGKILL after --grace.
func TestCommandIgnoringSIGTERMIsKilled(t *testing.T) {
	srv, url := redisServer(t)
	dir := t.TempDir()
	const grace = 500 * time.Millisecond
	p := start(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "--ttl", "600ms", "--grace", grace.String(), "job", "--",
		"/bin/sh", "-c", `trap '' TERM; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
	pgid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, dir+"/pid", 10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	client := srv.Client(t, nil)
	lostAt := time.Now()
	if err := client.Do(context.Background(), client.B().Del().Key(lockKey("job")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	code := p.wait(30 * time.Second)
	t.Logf("fencedlock exited %v after the loss (grace %v)", p.ended.Sub(lostAt), grace)
	if code != exitLeaseLost {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "sending SIGKILL") || !strings.Contains(p.stderr.String(), "killed by signal 9 (killed)") {
		t.Errorf("stderr does not report the SIGKILL:\n%s", p.stderr)
	}
	if p.ended.Sub(lostAt) < grace {
		t.Errorf("fencedlock exited %v after the loss, before the grace period %v ended", p.ended.Sub(lostAt), grace)
	}
	// SIGKILLed processes vanish once reaped (the orphaned sleep by init):
	// allow that a moment.
	var err2 error
	for i := 0; i < 200; i++ {
		if err2 = syscall.Kill(-pgid, 0); errors.Is(err2, syscall.ESRCH) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err2, syscall.ESRCH) {
		t.Errorf("process group %d still has processes 2s after fencedlock exited (kill -0: %v)", pgid, err2)
	}
}

// TestSignalsAreForwarded: SIGTERM and SIGINT sent to fencedlock reach the
// command; fencedlock releases the lock after the command exits and exits
// with its code.
func TestSignalsAreForwarded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			srv, url := redisServer(t)
			dir := t.TempDir()
			p := start(t, []string{"FENCEDLOCK_REDIS=" + url}, "run", "--ttl", "30s", "job", "--", "/bin/sh", "-c",
				`trap 'echo got > `+dir+`/sig; exit 5' TERM INT; echo $$ > `+dir+`/pid; while :; do sleep 0.05; done`)
			waitFile(t, dir+"/pid", 10*time.Second)
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code := p.wait(20 * time.Second)
			if code != 5 {
				t.Errorf("exit code %d, want the command's 5; stderr:\n%s", code, p.stderr)
			}
			waitFile(t, dir+"/sig", time.Second)
			if !strings.Contains(p.stderr.String(), "forwarding "+signalName(sig)) {
				t.Errorf("stderr does not mention the forwarding:\n%s", p.stderr)
			}
			// Released at once, not left to expire (the TTL is 30s).
			client := srv.Client(t, nil)
			n, err := client.Do(context.Background(), client.B().Exists().Key(lockKey("job")).Build()).AsInt64()
			if err != nil || n != 0 {
				t.Errorf("lock key after exit: exists=%d, %v; want released", n, err)
			}
		})
	}
}

func signalName(sig syscall.Signal) string { return sig.String() }

// TestExitCodes checks the documented exit codes of run.
func TestExitCodes(t *testing.T) {
	srv, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	cases := []struct {
		name string
		args []string
		env  []string
		code int
		msg  string
	}{
		{"command's code", []string{"run", "k", "--", "/bin/sh", "-c", "exit 7"}, env, 7, ""},
		{"command killed by a signal", []string{"run", "k", "--", "/bin/sh", "-c", "kill -KILL $$"}, env, 128 + 9, ""},
		{"command not found", []string{"run", "k", "--", "no-such-command-fencedlock"}, env, exitNotFound, "cannot start"},
		{"command not executable", []string{"run", "k", "--", "/etc/passwd"}, env, exitCannotExec, "cannot start"},
		{"usage", []string{"run", "--ttl", "0s", "k", "--", "true"}, env, exitUsage, "out of range"},
		{"no backend", []string{"run", "k", "--", "true"}, nil, exitUsage, "give --redis URL or --etcd ENDPOINTS"},
		{"server unreachable", []string{"run", "--redis", "redis://127.0.0.1:1", "k", "--", "true"}, nil, exitBackend, "is the server running"},
		{"wrong password", []string{"run", "--redis", "redis://locker:wrong@" + srv.Addr, "k", "--", "true"}, nil, exitBackend, "credentials"},
		{"bad URL", []string{"inspect", "--redis", "http://x:secretpw@h", "k"}, nil, exitBackend, "invalid URL scheme"},
		{"bad key prefix", []string{"inspect", "--redis", url, "--key-prefix", "a{b", "k"}, nil, exitUsage, "KeyPrefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, p := runBin(t, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), tc.msg) {
				t.Errorf("stderr does not say %q:\n%s", tc.msg, p.stderr)
			}
			if strings.Contains(p.stderr.String(), "s3cret") || strings.Contains(p.stderr.String(), "secretpw") {
				t.Errorf("stderr shows a password:\n%s", p.stderr)
			}
		})
	}
}

// TestTryAndWaitOnHeldKey: --try exits 75 at once naming the holder;
// --wait reports progress, then exits 75; -q silences the progress.
func TestTryAndWaitOnHeldKey(t *testing.T) {
	_, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	dir := t.TempDir()
	holder := start(t, env, "run", "--ttl", "5s", "held", "--", "/bin/sh", "-c", `echo "$FENCEDLOCK_HOLDER" > `+dir+`/holder; sleep 30`)
	holderID := strings.TrimSpace(waitFile(t, dir+"/holder", 10*time.Second))

	code, p := runBin(t, env, "run", "--try", "held", "--", "touch", dir+"/ran")
	if code != exitNotAcquired || !strings.Contains(p.stderr.String(), "held by holder "+holderID) {
		t.Errorf("--try: exit %d, stderr:\n%s", code, p.stderr)
	}
	code, p = runBin(t, env, "run", "--wait", "2500ms", "held", "--", "touch", dir+"/ran")
	if code != exitNotAcquired || !strings.Contains(p.stderr.String(), `waiting for "held": held by holder `+holderID) || !strings.Contains(p.stderr.String(), "--wait 2.5s expired") {
		t.Errorf("--wait: exit %d, stderr:\n%s", code, p.stderr)
	}
	code, p = runBin(t, env, "run", "-q", "--wait", "300ms", "held", "--", "touch", dir+"/ran")
	if code != exitNotAcquired || strings.Contains(p.stderr.String(), "waiting") {
		t.Errorf("-q --wait: exit %d, stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Stat(dir + "/ran"); err == nil {
		t.Error("a command ran while another held the lock")
	}
	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	holder.wait(10 * time.Second)
}

// TestInspect reads a held and a free lock through the binary, and checks
// that the owner token stored in Redis appears in no output.
func TestInspect(t *testing.T) {
	srv, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	dir := t.TempDir()
	holder := start(t, env, "run", "--ttl", "5s", "orders", "--", "/bin/sh", "-c", `echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+dir+`/lease; sleep 30`)
	lease := strings.Fields(waitFile(t, dir+"/lease", 10*time.Second))
	client := srv.Client(t, nil)
	token, err := client.Do(context.Background(), client.B().Get().Key(lockKey("orders")).Build()).ToString()
	if err != nil || len(token) < 16 {
		t.Fatalf("reading the owner token from Redis: %q, %v", token, err)
	}

	code, p := runBin(t, env, "inspect", "--json", "orders")
	if code != 0 {
		t.Fatalf("inspect --json: exit %d: %s", code, p.stderr)
	}
	var got inspectOutput
	if err := json.Unmarshal([]byte(p.stdout.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, p.stdout)
	}
	if !got.Held || strconv.FormatUint(got.Fence, 10) != lease[0] || got.Holder != lease[1] || got.TTLms <= 0 || got.TTLms > 5000 {
		t.Errorf("inspect --json = %+v; the holder's lease is fence %s, holder %s", got, lease[0], lease[1])
	}
	code, text := runBin(t, env, "inspect", "orders")
	if code != 0 || !strings.Contains(text.stdout.String(), "holder:  "+lease[1]) {
		t.Errorf("inspect: exit %d:\n%s", code, text.stdout)
	}
	for _, out := range []string{p.stdout.String(), p.stderr.String(), text.stdout.String(), text.stderr.String(), holder.stderr.String()} {
		if strings.Contains(out, token) || strings.Contains(out, token[:10]) {
			t.Errorf("output contains the owner token:\n%s", out)
		}
	}

	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	holder.wait(10 * time.Second)
	code, p = runBin(t, env, "inspect", "--json", "orders")
	if code != 0 || !strings.Contains(p.stdout.String(), `"held":false`) || !strings.Contains(p.stdout.String(), `"fence":`+lease[0]) {
		t.Errorf("inspect after release: exit %d: %s %s", code, p.stdout, p.stderr)
	}
}

// TestDemo runs the README's main job end to end: on the embedded Redis,
// and against a real redis-server with user:password in the URL, where the
// test reads the resource hash itself to see that the server kept B's
// write and its fence, and that --no-fencing lets A's late write in.
func TestDemo(t *testing.T) {
	check := func(t *testing.T, args ...string) string {
		code, p := runBin(t, nil, args...)
		out := p.stdout.String()
		t.Logf("fencedlock %s:\n%s", strings.Join(args, " "), out)
		if code != 0 {
			t.Errorf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
		}
		for _, want := range []string{"fenced resource: Redis hash \"demo:orders:resource\"", "written with FencedSet",
			"SIGSTOP A", "SIGCONT A", "REJECTED \"written by A\" with fence 1", "fencing: stale token: 1 is older than accepted 2",
			"wrote \"written by A\" with fence 1: REJECTED by the server as stale", "wrote \"written by B\" with fence 2: accepted",
			"A's late release deleted nothing", "resource: \"written by B\", fence 2", "1 of 2 writes accepted", "outcome: SAFE"} {
			if !strings.Contains(out, want) {
				t.Errorf("demo output lacks %q", want)
			}
		}
		return out
	}
	unfenced := func(t *testing.T, args ...string) {
		code, p := runBin(t, nil, append([]string{"demo", "--no-fencing"}, args...)...)
		out := p.stdout.String()
		t.Logf("fencedlock demo --no-fencing %s:\n%s", strings.Join(args, " "), out)
		if code != exitFailure {
			t.Errorf("exit code %d, want %d", code, exitFailure)
		}
		for _, want := range []string{"written with a plain HSET", "wrote \"written by A\" with fence 1: accepted",
			"resource: \"written by A\"", "2 of 2 writes accepted", "outcome: UNSAFE", "late write with the stale fence was ACCEPTED"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
	}
	t.Run("embedded", func(t *testing.T) { check(t, "demo") })
	// The check has teeth: without fencing, the same run corrupts the
	// resource, and the demo says so and fails.
	t.Run("no fencing", func(t *testing.T) { unfenced(t) })
	t.Run("redis-server", func(t *testing.T) {
		s, url := redisServer(t)
		// A stale record from an earlier run is cleared: the demo starts
		// from nothing.
		if _, err := s.CLI(t, "HSET", "demo:orders:resource", "value", "old", "fencedlock:fence", "99", "fencedlock:holder", "someone"); err != nil {
			t.Fatal(err)
		}
		check(t, "demo", "--redis", url)
		hash, err := s.CLI(t, "HGETALL", "demo:orders:resource")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"value": "written by B", "fencedlock:fence": "2"}
		lines := strings.Split(strings.TrimSpace(hash), "\n")
		got := map[string]string{}
		for i := 0; i+1 < len(lines); i += 2 {
			got[lines[i]] = lines[i+1]
		}
		for f, v := range want {
			if got[f] != v {
				t.Errorf("on the server, field %s of the resource is %q, want %q (HGETALL: %q)", f, got[f], v, hash)
			}
		}
		if len(got["fencedlock:holder"]) != 16 {
			t.Errorf("holder field %q is not a holder id", got["fencedlock:holder"])
		}

		unfenced(t, "--redis", url, "--lock", "demo:plain")
		if v, err := s.CLI(t, "HGET", "demo:plain:resource", "value"); err != nil || strings.TrimSpace(v) != "written by A" {
			t.Errorf("on the server, the unfenced resource holds %q (%v), want A's late write", v, err)
		}
	})
	t.Run("resource inside the key prefix", func(t *testing.T) {
		code, p := runBin(t, nil, "demo", "--resource", "fencedlock:x")
		if code != exitUsage || !strings.Contains(p.stderr.String(), "inside the key prefix") {
			t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, p.stderr)
		}
	})
}
