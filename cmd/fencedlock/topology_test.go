//go:build unix

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestRedisSentinelURL: the documented Sentinel form reaches the primary
// that a real redis-sentinel monitors.
func TestRedisSentinelURL(t *testing.T) {
	primary := testserver.StartRedis(t, testserver.WithUser("locker", "s3cret"))
	port := clitest.FreeTCPPort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	lines := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"daemonize no",
		"dir " + strconv.Quote(dir),
		"sentinel monitor mymaster 127.0.0.1 " + strconv.Itoa(primary.Port) + " 1",
		"sentinel auth-user mymaster locker",
		"sentinel auth-pass mymaster s3cret",
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startLogged(t, "Sentinel ID is", testserver.Binary(t, "redis-sentinel"), conf)
	url := "redis://locker:s3cret@127.0.0.1:" + strconv.Itoa(port) + "?master_set=mymaster"
	checkURL(t, url, nil, func() string { return get(t, primary, 0, "fencedlock:{job}:fence") })
}

// TestRedisClusterURL: a Cluster node given as a plain URL is detected as
// a cluster, and the lock's keys (one hash slot) work on it.
func TestRedisClusterURL(t *testing.T) {
	srv, url := redisServerWith(t, testserver.WithConfig("cluster-enabled yes", "cluster-config-file nodes.conf"))
	if out, err := srv.CLI(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %q, %v", out, err)
	}
	for i := 0; ; i++ {
		out, err := srv.CLI(t, "CLUSTER", "INFO")
		if err == nil && strings.Contains(out, "cluster_state:ok") {
			break
		}
		if i > 200 {
			t.Fatalf("cluster not ok after 10s: %q, %v", out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkURL(t, url, nil, func() string {
		out, err := srv.CLI(t, "GET", "fencedlock:{job}:fence")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	})
}

func redisServerWith(t *testing.T, opts ...testserver.RedisOption) (*testserver.Redis, string) {
	t.Helper()
	s := testserver.StartRedis(t, append([]testserver.RedisOption{testserver.WithUser("locker", "s3cret")}, opts...)...)
	return s, "redis://locker:s3cret@" + s.Addr
}

// startLogged starts a server process, waits (bounded) for ready in its
// output, and stops it at the end of the test.
func startLogged(t *testing.T, ready string, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	found := make(chan struct{})
	var log strings.Builder
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), ready) {
					signalled = true
					close(found)
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-found:
	case <-done:
		t.Fatalf("%s exited during start:\n%s", bin, log.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("%s not ready after 15s", bin)
	}
}
