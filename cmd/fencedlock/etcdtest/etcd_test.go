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
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/etcd/clustertest/harness"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// Exit codes of fencedlock (see its package documentation).
const (
	exitLeaseLost   = 76
	exitNotAcquired = 75
	exitBackend     = 69
)

// bin is the fencedlock binary, built from the root module by TestMain.
var bin = clitest.Bin{Name: "fencedlock", EnvPrefix: "FENCEDLOCK_", RunTimeout: 90 * time.Second}

func TestMain(m *testing.M) {
	harness.Setup("etcdtest")
	os.Exit(bin.Main(m, "../../..", "./cmd/fencedlock"))
}

// cluster starts a 3-member cluster on loopback TCP and returns it with
// its comma-separated client endpoints and an operator's client.
func cluster(t *testing.T) (*integration.Cluster, string, *clientv3.Client) {
	t.Helper()
	harness.BeforeTest(t, "etcdtest")
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

// newBackend returns an etcd backend on the operator's client, closed
// when the test ends.
func newBackend(t *testing.T, admin *clientv3.Client) *etcdb.Backend {
	t.Helper()
	b, err := etcdb.New(admin, etcdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// runJSON runs the binary with env and args and returns the JSON object
// it printed, decoded into a T; it fails t unless the binary exits 0 with
// such an object on its standard output.
func runJSON[T any](t *testing.T, env []string, args ...string) T {
	t.Helper()
	var v T
	code, p := bin.Run(t, env, args...)
	if err := json.Unmarshal([]byte(p.Stdout.String()), &v); code != 0 || err != nil {
		t.Fatalf("%s: exit %d, %v; stdout %q, stderr:\n%s", strings.Join(args, " "), code, err, p.Stdout, p.Stderr)
	}
	return v
}

// lockDir is the etcd directory of a lock's queue (package etcd's layout,
// default prefix).
func lockDir(key string) string { return "fencedlock/locks/" + key + "/" }

// TestEtcd runs the CLI's main properties on one cluster (starting a
// cluster per property would dominate the run time).
func TestEtcd(t *testing.T) {
	clus, eps, admin := cluster(t)
	env := []string{"FENCEDLOCK_ETCD=" + eps}

	// A run the supervisor cut short because a renewal reached it late
	// (about 0.22x the TTL: a loaded machine) makes the attempt
	// inconclusive; it is retried once with a TTL sized by the delay
	// measured, accepting no cut run (see the Redis TestRunNeverOverlaps).
	t.Run("runs never overlap", func(t *testing.T) {
		const procs, rounds, grace = 3, 2, 10 * time.Second // grace: run's default
		runs, ttl, lag := bin.RunsNeverOverlap(t, env, "shared", time.Minute, 2*time.Second, grace, procs, rounds, switchFired)
		t.Logf("%d runs by %d processes on etcd with --ttl %v, no overlap; scheduling delay max %v", len(runs.Gaps)+1, procs, ttl, lag)
	})

	t.Run("inspect", func(t *testing.T) {
		dir := t.TempDir()
		holder := bin.Start(t, env, "run", "--ttl", "5s", "orders", "--", "/bin/sh", "-c", `echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+dir+`/lease; sleep 30`)
		lease := strings.Fields(clitest.WaitFile(t, dir+"/lease", 20*time.Second))
		got := runJSON[struct {
			Held   bool   `json:"held"`
			Holder string `json:"holder"`
			TTLms  int64  `json:"ttl_ms"`
			Fence  uint64 `json:"fence"`
		}](t, env, "inspect", "--json", "orders")
		if !got.Held || strconv.FormatUint(got.Fence, 10) != lease[0] || got.Holder != lease[1] || got.TTLms <= 0 {
			t.Errorf("inspect --json = %+v; the holder has fence %s, holder %s", got, lease[0], lease[1])
		}
		code, p := bin.Run(t, env, "run", "--try", "orders", "--", "true")
		if code != exitNotAcquired || !strings.Contains(p.Stderr.String(), "held by holder "+lease[1]) {
			t.Errorf("--try on a held key: exit %d: %s", code, p.Stderr)
		}
		_ = holder.Cmd.Process.Signal(syscall.SIGTERM)
		holder.Wait(20 * time.Second)
	})

	t.Run("key deleted terminates the command", func(t *testing.T) {
		checkLeaseLoss(t, env, "job", "key deleted", 20*time.Second, func() time.Time {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			lostAt := time.Now()
			resp, err := admin.Delete(ctx, lockDir("job"), clientv3.WithPrefix())
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("deleting the lock key: %v (deleted %d)", err, resp.Deleted)
			}
			return lostAt
		})
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
		code, p := bin.Run(t, nil, "demo", "--etcd", eps)
		t.Logf("fencedlock demo --etcd:\n%s", p.Stdout)
		if code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, p.Stderr)
		}
		for _, want := range []string{"fenced resource: etcd key \"demo:orders:resource\"", "written with FencedPut",
			"REJECTED \"written by A\"", "fencing: stale token", "A's late release deleted nothing",
			"resource: \"written by B\", fence", "1 of 2 writes accepted", "outcome: SAFE"} {
			if !strings.Contains(p.Stdout.String(), want) {
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

		code, p = bin.Run(t, nil, "demo", "--no-fencing", "--etcd", eps, "--lock", "demo:plain")
		t.Logf("fencedlock demo --no-fencing --etcd:\n%s", p.Stdout)
		if code != 1 {
			t.Errorf("--no-fencing: exit %d, want 1; stderr:\n%s", code, p.Stderr)
		}
		for _, want := range []string{"written with a plain Put", "resource: \"written by A\"", "outcome: UNSAFE"} {
			if !strings.Contains(p.Stdout.String(), want) {
				t.Errorf("--no-fencing output lacks %q", want)
			}
		}
		resp, err = admin.Get(ctx, "demo:plain:resource")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "written by A" {
			t.Errorf("on the cluster, the unfenced resource is %v (%v), want A's late write", resp, err)
		}
	})

	t.Run("cluster stopped terminates the command", func(t *testing.T) {
		checkLeaseLoss(t, env, "job2", "members stopped", 30*time.Second, func() time.Time {
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
			return lostAt
		})
		code, p2 := bin.Run(t, env, "inspect", "job2")
		if code != exitBackend {
			t.Errorf("inspect with the cluster down: exit %d, want %d; stderr:\n%s", code, exitBackend, p2.Stderr)
		}
	})
}

// switchFired tells a run that the supervisor's dead man's switch cut
// short (exit 76) while the server still kept its lease.
var switchFired = clitest.SwitchCut(exitLeaseLost)

// checkLeaseLoss runs a command under the lock key with a 2s TTL and a 3s
// grace period, then calls lose, which takes the lease away and returns
// when it was lost (what names how, for the log). fencedlock must exit
// with exitLeaseLost within TTL+grace+slack, its supervisor must have sent
// the command SIGTERM, and the command must have got it within TTL+grace
// of the loss.
//
// What the command promises (docs/cli-run.md) is that SIGTERM is sent,
// and SIGKILL at the latest TTL/10 before the local deadline: when the
// switch fires (renewals failing, as with the cluster stopped) that is
// min(grace, TTL/4) = 500ms after SIGTERM. A loaded machine may not give
// the command's shell the CPU within that time to run its trap: then the
// command ends by SIGKILL without having recorded SIGTERM, which is the
// documented behaviour, not a fault. The test accepts it only if the
// supervisor reports both signals sent and run reports the command killed
// by signal 9; it logs the scheduling delay it measured meanwhile.
func checkLeaseLoss(t *testing.T, env []string, key, what string, slack time.Duration, lose func() time.Time) {
	t.Helper()
	const ttl, grace = 2 * time.Second, 3 * time.Second
	lag := clitest.StartLag(t)
	dir := t.TempDir()
	p := bin.Start(t, env, "run", "--ttl", ttl.String(), "--grace", grace.String(), key, "--", "/bin/sh", "-c", clitest.TermScript(dir))
	clitest.WaitFile(t, dir+"/pid", 20*time.Second)
	lostAt := lose()
	code := p.Wait(ttl + grace + slack)
	stderr := p.Stderr.String()
	toExit := p.Ended.Sub(lostAt)
	if code != exitLeaseLost {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, exitLeaseLost, stderr)
	}
	if !strings.Contains(stderr, "sending SIGTERM") {
		t.Errorf("the supervisor does not report sending SIGTERM; stderr:\n%s", stderr)
	}
	termAt, recorded := clitest.TermRecorded(t, dir+"/term", time.Second)
	if !recorded {
		t.Logf("etcd, %s: the command did not record SIGTERM; fencedlock exited %v after the loss; scheduling delay max %v; stderr:\n%s", what, toExit, lag.Max().Round(time.Millisecond), stderr)
		if !strings.Contains(stderr, "sending SIGKILL") || !strings.Contains(stderr, "ended (killed by signal 9 (killed))") {
			t.Errorf("the command recorded no SIGTERM, yet it was not killed by SIGKILL; stderr:\n%s", stderr)
		}
		return
	}
	toTerm := termAt.Sub(lostAt)
	t.Logf("etcd, %s: SIGTERM reached the command %v after the loss; fencedlock exited %v after it (TTL %v, grace %v; scheduling delay max %v)", what, toTerm, toExit, ttl, grace, lag.Max().Round(time.Millisecond))
	if toTerm > ttl+grace {
		t.Errorf("terminated %v after the loss, more than TTL+grace", toTerm)
	}
}
