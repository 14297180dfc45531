//go:build unix

package clitest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestBinStartRunWait runs /bin/sh through Bin: the environment drops the
// variables with EnvPrefix and adds the given ones, outputs are captured,
// exit codes come back, and Wait is bounded.
func TestBinStartRunWait(t *testing.T) {
	t.Setenv("CLITEST_INHERITED", "dropped")
	t.Setenv("KEPT_VAR", "kept")
	b := Bin{Name: "sh", Path: "/bin/sh", EnvPrefix: "CLITEST_", RunTimeout: 20 * time.Second}
	code, p := b.Run(t, []string{"CLITEST_GIVEN=given"}, "-c", `echo "out:$CLITEST_INHERITED:$CLITEST_GIVEN:$KEPT_VAR"; echo err >&2; exit 3`)
	if code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	if got := p.Stdout.String(); got != "out::given:kept\n" {
		t.Errorf("stdout %q, want %q", got, "out::given:kept\n")
	}
	if got := p.Stderr.String(); got != "err\n" {
		t.Errorf("stderr %q, want %q", got, "err\n")
	}
	if p.Ended.IsZero() {
		t.Error("Ended not set after Run")
	}

	// Start returns while the process runs; Wait reports its exit code.
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	p = b.Start(t, nil, "-c", `sleep 0.05; echo hello > `+path+`; exit 0`)
	if got := WaitFile(t, path, 10*time.Second); got != "hello\n" {
		t.Errorf("WaitFile = %q, want %q", got, "hello\n")
	}
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestStartKillsAtCleanup: a process still running when the test ends is
// killed (and Wait in the cleanup returns).
func TestStartKillsAtCleanup(t *testing.T) {
	dir := t.TempDir()
	var p *Proc
	t.Run("inner", func(t *testing.T) {
		b := Bin{Name: "sh", Path: "/bin/sh"}
		p = b.Start(t, nil, "-c", `echo $$ > `+dir+`/pid; exec sleep 60`)
		WaitFile(t, dir+"/pid", 10*time.Second)
	})
	select {
	case <-p.done:
	default:
		t.Fatal("process still running after its test's cleanup")
	}
	if p.Cmd.ProcessState.Success() {
		t.Errorf("process state %v, want killed", p.Cmd.ProcessState)
	}
	b, err := os.ReadFile(dir + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || pid != p.Cmd.Process.Pid {
		t.Errorf("pid file %q (%v), want %d", b, err, p.Cmd.Process.Pid)
	}
}

// TestSyncBuffer writes from several goroutines at once (run with -race).
func TestSyncBuffer(t *testing.T) {
	var s SyncBuffer
	var wg sync.WaitGroup
	const writers, writes = 4, 100
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < writes; j++ {
				_, _ = s.Write([]byte("x"))
				_ = s.String()
			}
		}()
	}
	wg.Wait()
	if n := len(s.String()); n != writers*writes {
		t.Errorf("%d bytes, want %d", n, writers*writes)
	}
}

// TestFreeTCPPort: the port can be listened on at 127.0.0.1.
func TestFreeTCPPort(t *testing.T) {
	port := FreeTCPPort(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listening on the free port %d: %v", port, err)
	}
	l.Close()
}

// TestWriteCerts: the server certificate verifies against the CA for
// localhost and 127.0.0.1 as a server certificate, the client one as a
// client certificate, and each key pair loads.
func TestWriteCerts(t *testing.T) {
	c := WriteCerts(t, t.TempDir())
	caPEM, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	verify := func(cert, key string, usage x509.ExtKeyUsage, name string) error {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatalf("%s: %v", cert, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if err := verify(c.ServerCert, c.ServerKey, x509.ExtKeyUsageServerAuth, name); err != nil {
			t.Errorf("server certificate for %q: %v", name, err)
		}
	}
	if err := verify(c.ServerCert, c.ServerKey, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("server certificate as a client certificate: %v", err)
	}
	if err := verify(c.ClientCert, c.ClientKey, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if err := verify(c.ClientCert, c.ClientKey, x509.ExtKeyUsageServerAuth, "localhost"); err == nil {
		t.Error("the client certificate verifies as a server certificate")
	}
}

// TestCheckRunsDisjoint drives CheckRunsDisjoint with a stand-in binary, a
// shell script that runs the command after "--" under flock(1) with the
// next number of a counter as FENCEDLOCK_FENCE: every run must pass.
func TestCheckRunsDisjoint(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock(1) is needed (util-linux): %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "locker")
	script := `#!/bin/sh
exec 9>"$LOCKDIR/lock"
flock 9 || exit 1
n=$(( $(cat "$LOCKDIR/n" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$LOCKDIR/n"
while [ "$1" != "--" ]; do shift; done
shift
FENCEDLOCK_FENCE=$n "$@"
`
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	b := Bin{Name: "locker", Path: path, RunTimeout: 20 * time.Second}
	gaps := b.CheckRunsDisjoint(t, []string{"LOCKDIR=" + dir}, []string{"run", "key", "--"}, 3, 2)
	if len(gaps) != 5 {
		t.Errorf("%d gaps, want 5 (6 runs)", len(gaps))
	}
	for _, g := range gaps {
		if g < 0 {
			t.Errorf("negative gap %v", g)
		}
	}
}

// TestTermScript: the command records its pid, and the time it gets
// SIGTERM, which WaitUnixNanos reads back.
func TestTermScript(t *testing.T) {
	dir := t.TempDir()
	b := Bin{Name: "sh", Path: "/bin/sh"}
	p := b.Start(t, nil, "-c", TermScript(dir))
	WaitFile(t, dir+"/pid", 10*time.Second)
	sent := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	got := WaitUnixNanos(t, dir+"/term", time.Second)
	if got.Before(sent.Add(-time.Second)) || got.After(p.Ended.Add(time.Second)) {
		t.Errorf("SIGTERM recorded at %v, sent at %v, exit seen at %v", got, sent, p.Ended)
	}
}

// TestCheckIntervals: the log check of RunsDisjoint stays strict when runs
// are cut short: an overlap with a complete interval fails, whether the
// later run completed or was cut, and only as many intervals may lack an
// end as runs were cut.
func TestCheckIntervals(t *testing.T) {
	cases := []struct {
		name      string
		log       string
		runs, cut int
		problem   string // "" for none
	}{
		{"disjoint", "start 1 10\nend 1 20\nstart 2 30\nend 2 40\n", 2, 0, ""},
		{"overlap", "start 1 10\nend 1 20\nstart 2 15\nend 2 40\n", 2, 0, "overlap: fence 1 ran [10, 20], fence 2 started at 15"},
		{"overlap with an interval two back", "start 1 10\nend 1 100\nstart 2 20\nend 2 30\nstart 3 40\nend 3 50\n", 3, 0, "fence 3 started at 40"},
		{"cut run tolerated", "start 1 10\nend 1 20\nstart 2 30\nstart 3 50\nend 3 60\n", 3, 1, ""},
		{"cut run that never started", "start 1 10\nend 1 20\n", 2, 1, ""},
		{"cut run starting inside another", "start 1 10\nend 1 20\nstart 2 15\n", 2, 1, "overlap: fence 1 ran [10, 20], fence 2 started at 15"},
		{"run starting inside a complete one after a cut", "start 1 10\nstart 2 30\nend 2 60\nstart 3 50\nend 3 70\n", 3, 1, "fence 3 started at 50"},
		{"incomplete without a cut", "start 1 10\nend 1 20\nstart 2 30\n", 2, 0, "incomplete"},
		{"more incomplete than cut", "start 1 10\nstart 2 30\n", 2, 1, "incomplete"},
		{"missing run", "start 1 10\nend 1 20\n", 2, 0, "distinct fences"},
		{"fences decrease", "start 2 10\nend 2 20\nstart 1 30\nend 1 40\n", 2, 0, "fence 1 ran after fence 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, problems := checkIntervals(tc.log, tc.runs, tc.cut)
			got := strings.Join(problems, "; ")
			switch {
			case tc.problem == "" && got != "":
				t.Errorf("problems %q, want none", got)
			case tc.problem != "" && !strings.Contains(got, tc.problem):
				t.Errorf("problems %q, want one saying %q", got, tc.problem)
			}
		})
	}
}

// TestSwitchFired reads the time out of the supervisor's message (as
// fencedlock run writes it) and tells it from other ends.
func TestSwitchFired(t *testing.T) {
	stderr := `fencedlock: acquired "job": fence 1, holder baefd7e3e61c0ebb, lease 1s
fencedlock run: no lease extension from fencedlock (stopped, killed, or its renewals failing); local deadline 2026-12-01T18:39:14.670867019Z in 342ms: sending SIGTERM to 2 processes of "/bin/sh" (process group 26766 and its descendants), SIGKILL in 242ms
`
	at, fired := SwitchFired(stderr)
	want := time.Date(2026, 12, 1, 18, 39, 14, 328867019, time.UTC)
	if !fired || !at.Equal(want) {
		t.Errorf("SwitchFired = %v, %v; want %v, true", at, fired, want)
	}
	if _, fired := SwitchFired(`fencedlock run: lease on "job" lost: key deleted: sending SIGTERM`); fired {
		t.Error("SwitchFired on a lease lost at the server")
	}
	if got := SwitchLateness(time.Second, 3*time.Second); got < 216*time.Millisecond || got > 217*time.Millisecond {
		t.Errorf("SwitchLateness(1s, 3s) = %v, want 0.55s-1s/3", got)
	}
	if got := RetryTTL(time.Second, 3*time.Second, 300*time.Millisecond); got != 4800*time.Millisecond {
		t.Errorf("RetryTTL with 300ms measured = %v, want 4.8s (8x two lags)", got)
	}
	if got := RetryTTL(time.Second, 3*time.Second, 0); got != 1800*time.Millisecond {
		t.Errorf("RetryTTL with nothing measured = %v, want 1.8s (8x the 217ms the switch implies)", got)
	}
}
