// Package etcdtest runs the fencedlock binary against an in-process
// 3-member etcd cluster (go.etcd.io/etcd/tests/v3/framework/integration,
// members on loopback TCP). It is a separate module so that the etcd server
// never enters the library's dependency graph; the binary itself is built
// from the root module.
//
// Run: cd cmd/fencedlock/etcdtest && go test -race ./...
// Never with -short: the framework would skip every cluster, so TestMain
// refuses it.
package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
)

// Exit codes of fencedlock (see its package documentation).
const (
	exitLeaseLost   = 76
	exitNotAcquired = 75
	exitBackend     = 69
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "etcdtest: refusing -short: the etcd framework would skip every cluster test")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "fencedlock-etcd-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "fencedlock")
	build := exec.Command("go", "build", "-o", binPath, "./cmd/fencedlock")
	build.Dir = "../../.." // the root module
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

// cluster starts a 3-member cluster on loopback TCP and returns it with
// its comma-separated client endpoints and an operator's client.
func cluster(t *testing.T) (*integration.Cluster, string, *clientv3.Client) {
	t.Helper()
	t.Cleanup(func() {
		if t.Skipped() {
			t.Errorf("etcdtest: the etcd framework skipped %s; skipping is not allowed", t.Name())
		}
	})
	integration.BeforeTest(t)
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 3, UseTCP: true, UseIP: true})
	t.Cleanup(func() { clus.Terminate(t) })
	var eps []string
	for _, m := range clus.Members {
		eps = append(eps, m.GRPCURL)
	}
	admin, err := clus.NewClientV3(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return clus, strings.Join(eps, ","), admin
}

// lockDir is the etcd directory of a lock's queue (package etcd's layout,
// default prefix).
func lockDir(key string) string { return "fencedlock/locks/" + key + "/" }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	ended          time.Time
}

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
	go func() {
		_ = cmd.Wait()
		p.ended = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("fencedlock %q still running after %v; stderr:\n%s", p.cmd.Args[1:], timeout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

func runBin(t *testing.T, env []string, args ...string) (int, *proc) {
	t.Helper()
	p := start(t, env, args...)
	return p.wait(90 * time.Second), p
}

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

// TestEtcd runs the CLI's main properties on one cluster (starting a
// cluster per property would dominate the run time).
func TestEtcd(t *testing.T) {
	clus, eps, admin := cluster(t)
	env := []string{"FENCEDLOCK_ETCD=" + eps}

	t.Run("runs never overlap", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "log")
		script := `echo "start $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log + `; sleep 0.1; echo "end $FENCEDLOCK_FENCE $(date +%s%N)" >> ` + log
		const procs, rounds = 3, 2
		var wg sync.WaitGroup
		errs := make(chan string, procs*rounds)
		for i := 0; i < procs; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					code, p := runBin(t, env, "run", "-q", "--ttl", "2s", "--wait", "60s", "shared", "--", "/bin/sh", "-c", script)
					if code != 0 {
						errs <- fmt.Sprintf("exit %d: %s", code, p.stderr)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		type span struct{ fence, start, end int64 }
		spans := map[int64]*span{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var kind string
			var fence, ns int64
			if _, err := fmt.Sscan(line, &kind, &fence, &ns); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if spans[fence] == nil {
				spans[fence] = &span{fence: fence}
			}
			if kind == "start" {
				spans[fence].start = ns
			} else {
				spans[fence].end = ns
			}
		}
		if len(spans) != procs*rounds {
			t.Fatalf("%d distinct fences, want %d:\n%s", len(spans), procs*rounds, b)
		}
		var list []*span
		for _, s := range spans {
			list = append(list, s)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
		for i := 1; i < len(list); i++ {
			if list[i].start < list[i-1].end {
				t.Errorf("overlap: fence %d ran until %d, fence %d started at %d", list[i-1].fence, list[i-1].end, list[i].fence, list[i].start)
			}
			if list[i].fence <= list[i-1].fence {
				t.Errorf("fence %d ran after fence %d", list[i].fence, list[i-1].fence)
			}
		}
		t.Logf("%d runs by %d processes on etcd, no overlap", len(list), procs)
	})

	t.Run("inspect", func(t *testing.T) {
		dir := t.TempDir()
		holder := start(t, env, "run", "--ttl", "5s", "orders", "--", "/bin/sh", "-c", `echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+dir+`/lease; sleep 30`)
		lease := strings.Fields(waitFile(t, dir+"/lease", 20*time.Second))
		code, p := runBin(t, env, "inspect", "--json", "orders")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr)
		}
		var got struct {
			Held   bool   `json:"held"`
			Holder string `json:"holder"`
			TTLms  int64  `json:"ttl_ms"`
			Fence  uint64 `json:"fence"`
		}
		if err := json.Unmarshal([]byte(p.stdout.String()), &got); err != nil {
			t.Fatalf("%v: %s", err, p.stdout)
		}
		if !got.Held || strconv.FormatUint(got.Fence, 10) != lease[0] || got.Holder != lease[1] || got.TTLms <= 0 {
			t.Errorf("inspect --json = %+v; the holder has fence %s, holder %s", got, lease[0], lease[1])
		}
		code, p = runBin(t, env, "run", "--try", "orders", "--", "true")
		if code != exitNotAcquired || !strings.Contains(p.stderr.String(), "held by holder "+lease[1]) {
			t.Errorf("--try on a held key: exit %d: %s", code, p.stderr)
		}
		_ = holder.cmd.Process.Signal(syscall.SIGTERM)
		holder.wait(20 * time.Second)
	})

	t.Run("key deleted terminates the command", func(t *testing.T) {
		const ttl, grace = 2 * time.Second, 3 * time.Second
		dir := t.TempDir()
		p := start(t, env, "run", "--ttl", ttl.String(), "--grace", grace.String(), "job", "--", "/bin/sh", "-c",
			`echo $$ > `+dir+`/pid; trap 'date +%s%N > `+dir+`/term; exit 0' TERM; while :; do sleep 0.05; done`)
		waitFile(t, dir+"/pid", 20*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lostAt := time.Now()
		resp, err := admin.Delete(ctx, lockDir("job"), clientv3.WithPrefix())
		if err != nil || resp.Deleted != 1 {
			t.Fatalf("deleting the lock key: %v (deleted %d)", err, resp.Deleted)
		}
		code := p.wait(ttl + grace + 20*time.Second)
		n, _ := strconv.ParseInt(strings.TrimSpace(waitFile(t, dir+"/term", time.Second)), 10, 64)
		toTerm := time.Unix(0, n).Sub(lostAt)
		t.Logf("etcd, key deleted: SIGTERM reached the command %v after the deletion (TTL %v, grace %v)", toTerm, ttl, grace)
		if code != exitLeaseLost {
			t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, p.stderr)
		}
		if toTerm > ttl+grace {
			t.Errorf("terminated %v after the loss, more than TTL+grace", toTerm)
		}
	})

	// The demo's resource is an etcd key written with FencedPut: the test
	// reads it from the cluster itself after the run. A value left by an
	// earlier run is cleared first. --no-fencing (plain Put) lets A's late
	// write in, and the demo fails.
	t.Run("demo", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Put(ctx, "demo:orders:resource", "left by an earlier run"); err != nil {
			t.Fatal(err)
		}
		code, p := runBin(t, nil, "demo", "--etcd", eps)
		t.Logf("fencedlock demo --etcd:\n%s", p.stdout)
		if code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
		}
		for _, want := range []string{"fenced resource: etcd key \"demo:orders:resource\"", "written with FencedPut",
			"REJECTED \"written by A\"", "fencing: stale token", "A's late release deleted nothing",
			"resource: \"written by B\", fence", "1 of 2 writes accepted", "outcome: SAFE"} {
			if !strings.Contains(p.stdout.String(), want) {
				t.Errorf("demo output lacks %q", want)
			}
		}
		resp, err := admin.Get(ctx, "demo:orders:resource")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "written by B" {
			t.Errorf("on the cluster, the resource is %v (%v), want B's write", resp, err)
		}
		fences, err := admin.Get(ctx, "fencedlock/fences/", clientv3.WithPrefix())
		if err != nil || fences.Count != 1 {
			t.Errorf("fence records on the cluster: %v (%v), want the resource's one", fences, err)
		}

		code, p = runBin(t, nil, "demo", "--no-fencing", "--etcd", eps, "--lock", "demo:plain")
		t.Logf("fencedlock demo --no-fencing --etcd:\n%s", p.stdout)
		if code != 1 {
			t.Errorf("--no-fencing: exit %d, want 1; stderr:\n%s", code, p.stderr)
		}
		for _, want := range []string{"written with a plain Put", "resource: \"written by A\"", "outcome: UNSAFE"} {
			if !strings.Contains(p.stdout.String(), want) {
				t.Errorf("--no-fencing output lacks %q", want)
			}
		}
		resp, err = admin.Get(ctx, "demo:plain:resource")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "written by A" {
			t.Errorf("on the cluster, the unfenced resource is %v (%v), want A's late write", resp, err)
		}
	})

	t.Run("cluster stopped terminates the command", func(t *testing.T) {
		const ttl, grace = 2 * time.Second, 3 * time.Second
		dir := t.TempDir()
		p := start(t, env, "run", "--ttl", ttl.String(), "--grace", grace.String(), "job2", "--", "/bin/sh", "-c",
			`echo $$ > `+dir+`/pid; trap 'date +%s%N > `+dir+`/term; exit 0' TERM; while :; do sleep 0.05; done`)
		waitFile(t, dir+"/pid", 20*time.Second)
		// The lease is lost when the cluster loses its quorum: when the
		// second of three members has stopped.
		stopAt := time.Now()
		var lostAt time.Time
		for i, m := range clus.Members {
			m.Stop(t)
			if i == 1 {
				lostAt = time.Now()
			}
		}
		t.Logf("stopping the members took %v; quorum lost %v after the first stop began", time.Since(stopAt), lostAt.Sub(stopAt))
		code := p.wait(ttl + grace + 30*time.Second)
		n, _ := strconv.ParseInt(strings.TrimSpace(waitFile(t, dir+"/term", time.Second)), 10, 64)
		toTerm := time.Unix(0, n).Sub(lostAt)
		t.Logf("etcd, members stopped: SIGTERM reached the command %v after the quorum was lost (TTL %v, grace %v)", toTerm, ttl, grace)
		if code != exitLeaseLost {
			t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, p.stderr)
		}
		if toTerm > ttl+grace {
			t.Errorf("terminated %v after the loss, more than TTL+grace", toTerm)
		}
		code, p2 := runBin(t, env, "inspect", "job2")
		if code != exitBackend {
			t.Errorf("inspect with the cluster down: exit %d, want %d; stderr:\n%s", code, exitBackend, p2.stderr)
		}
	})
}
