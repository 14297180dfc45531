// Package clitest runs a command-line binary in tests as its users do: it
// builds the binary once for a test binary's TestMain, starts it as a
// process with a clean environment, waits for it with a bounded wait and
// kills it when the test ends. It also holds the small helpers the tests of
// cmd/fencedlock share with its separate etcd test module
// (cmd/fencedlock/etcdtest): a concurrency-safe output buffer, a bounded
// wait for a file a child process writes, a free loopback port and a
// throwaway certificate authority; and, for the test binaries that run
// themselves again as a server (StartSelf), the start and stop of such a
// child.
//
// It is imported by tests only; it is not part of the library's API.
package clitest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bin is a binary under test.
type Bin struct {
	// Name is the binary's file name and the name used in failure
	// messages, e.g. "fencedlock".
	Name string
	// Path is where Main built the binary.
	Path string
	// EnvPrefix selects the variables of the test's own environment that
	// Start does not pass on (e.g. "FENCEDLOCK_"), so each run sees only
	// the ones it is given.
	EnvPrefix string
	// RunTimeout bounds Run.
	RunTimeout time.Duration
}

// Main is the body of a TestMain: it builds the Go package pkg (a pattern
// such as "." or "./cmd/fencedlock", relative to dir; "" is the current
// directory) into a new temporary directory, sets b.Path, runs m and
// removes the directory. It returns the code to pass to os.Exit: 1, with
// the reason on stderr, if the build fails.
func (b *Bin) Main(m *testing.M, dir, pkg string) int {
	tmp, err := os.MkdirTemp("", b.Name+"-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	b.Path = filepath.Join(tmp, b.Name)
	build := exec.Command("go", "build", "-o", b.Path, pkg)
	build.Dir = dir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building %s: %v\n", b.Name, err)
		return 1
	}
	return m.Run()
}

// Proc is one run of the binary.
type Proc struct {
	t      *testing.T
	name   string
	done   chan struct{}
	Cmd    *exec.Cmd   // the process; Cmd.Process is set
	Stdout *SyncBuffer // what it wrote on stdout so far
	Stderr *SyncBuffer // what it wrote on stderr so far
	// Ended is when its exit was seen; valid once Wait has returned.
	Ended time.Time
}

// Start runs the binary with args. Its environment is the test's own
// without the variables starting with b.EnvPrefix, plus env. A process
// still running when the test ends is killed, with its process group.
func (b *Bin) Start(t *testing.T, env []string, args ...string) *Proc {
	t.Helper()
	return b.StartWith(t, env, nil, args...)
}

// StartWith is Start with the process attributes attr (nil for none), e.g.
// a process group of its own, so that a test can signal the binary's
// group as a terminal signals its foreground job.
func (b *Bin) StartWith(t *testing.T, env []string, attr *syscall.SysProcAttr, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(b.Path, args...)
	cmd.SysProcAttr = attr
	for _, kv := range os.Environ() {
		if b.EnvPrefix == "" || !strings.HasPrefix(kv, b.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &Proc{t: t, name: b.Name, Cmd: cmd, Stdout: new(SyncBuffer), Stderr: new(SyncBuffer), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", b.Name, err)
	}
	go func() {
		_ = cmd.Wait()
		p.Ended = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			killGroup(cmd.Process.Pid) // its children, if any share its group
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Run runs the binary to completion, waiting at most b.RunTimeout, and
// returns its exit code and the finished process.
func (b *Bin) Run(t *testing.T, env []string, args ...string) (int, *Proc) {
	t.Helper()
	p := b.Start(t, env, args...)
	return p.Wait(b.RunTimeout), p
}

// Wait waits at most timeout for the process to exit and returns its exit
// code; it fails the test, showing stderr, if the process is still running.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s %q still running after %v; stderr:\n%s", p.name, p.Cmd.Args[1:], timeout, p.Stderr)
	}
	return p.Cmd.ProcessState.ExitCode()
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads, such
// as a process's output copier and the test reading it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFile waits at most timeout until path holds at least one complete
// line (it ends with a newline), and returns its content; it fails the
// test if it does not.
func WaitFile(t *testing.T, path string, timeout time.Duration) string {
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

// FreeTCPPort returns a TCP port on 127.0.0.1 that was free a moment ago
// (FreePort); it fails the test if there is none.
func FreeTCPPort(t *testing.T) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago:
// the kernel gave it to a listener that FreePort closed, so another
// process may take it before the caller does.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
