package testserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

type fatalPanic struct{}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalPanic{})
}

func (f *fatalTB) Helper() {}

// TestMissingBinaryFails: without redis-server on PATH the test fails (not
// skips) with instructions.
func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatalPanic); !ok {
					panic(r)
				}
			}
		}()
		StartRedis(f)
	}()
	if !strings.Contains(f.msg, "redis-server not found on PATH") || !strings.Contains(f.msg, "apt-get install redis-server") {
		t.Fatalf("message %q does not say what to install", f.msg)
	}
}

// TestServerDiesWithTestProcess: a test binary that is killed with
// SIGKILL (no cleanup runs) takes its redis-server with it.
func TestServerDiesWithTestProcess(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		s := StartRedis(t)
		fmt.Println("ADDR", s.Addr)
		time.Sleep(time.Minute) // killed by the parent long before
		return
	}
	SkipShort(t, "redis-server (in a child test process, which runs without -short)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^TestServerDiesWithTestProcess$", "-test.v")
	// The child is killed, so its cleanup (t.TempDir's removal) never
	// runs: its temporary directory lives inside this test's, which is
	// removed (a directory per run was left in /tmp).
	cmd.Env = append(os.Environ(), "REDISTEST_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	var a string
	select {
	case a = <-addr:
	case <-time.After(30 * time.Second):
	}
	if a == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child did not start a server")
	}
	if c, err := net.Dial("tcp", a); err != nil {
		t.Fatalf("child's server not reachable: %v", err)
	} else {
		c.Close()
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Logf("server at %s gone after its test process was killed: %v", a, err)
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("server at %s still accepts connections 10s after its test process was killed", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
