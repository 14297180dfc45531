package testserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/redis/rueidis"
)

// StartTimeout bounds how long StartRedis waits for a server to accept
// connections.
const StartTimeout = 15 * time.Second

// RedisOption configures a Redis server started by StartRedis.
type RedisOption func(*config)

type config struct {
	lines    []string
	password string
	user     string
	tls      *TLS // serve TLS only (see WithTLS)
}

// WithConfig adds lines to the server's config file, e.g.
// "appendonly yes" or "tls-port 0". Later lines override earlier ones.
func WithConfig(lines ...string) RedisOption {
	return func(c *config) { c.lines = append(c.lines, lines...) }
}

// WithPassword sets requirepass; Client and CLI then authenticate.
func WithPassword(password string) RedisOption {
	return func(c *config) {
		c.password = password
		c.lines = append(c.lines, "requirepass "+quote(password))
	}
}

// WithUser adds an ACL user with full access and the given password and
// turns the default user off; Client and CLI then authenticate as that user.
func WithUser(user, password string) RedisOption {
	return func(c *config) {
		c.user, c.password = user, password
		c.lines = append(c.lines, fmt.Sprintf("user %s on >%s ~* &* +@all", user, password), "user default off")
	}
}

// WithReplicaOf makes the server a replica of primary.
func WithReplicaOf(primary *Redis) RedisOption {
	return func(c *config) {
		c.lines = append(c.lines, fmt.Sprintf("replicaof 127.0.0.1 %d", primary.Port))
		if primary.password != "" {
			c.lines = append(c.lines, "masterauth "+quote(primary.password))
			if primary.user != "" {
				c.lines = append(c.lines, "masteruser "+primary.user)
			}
		}
	}
}

// Redis is one redis-server process.
type Redis struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // working directory: config, data and log

	t        testing.TB
	bin      string
	conf     string
	password string
	user     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *logBuf

	tls *TLS // non-nil if the server only speaks TLS (WithTLS)

	// readyLine is the log line that means the process accepts
	// connections; empty means "Ready to accept connections".
	readyLine string
}

// logBuf collects a server's output.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) add(line []byte) {
	l.mu.Lock()
	l.b.Write(line)
	l.b.WriteByte('\n')
	l.mu.Unlock()
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartRedis starts a redis-server and registers its stop with t.Cleanup.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := Binary(t, "redis-server")
	var c config
	for _, o := range opts {
		o(&c)
	}
	s := &Redis{t: t, bin: bin, Dir: t.TempDir(), password: c.password, user: c.user, tls: c.tls}
	err := s.launch("redis.conf", func(port int) []string {
		base := append(serverConf(port, s.Dir),
			"save \"\"",
			"appendonly no",
			// Replicas sync at once instead of after the default 5s.
			"repl-diskless-sync-delay 0",
		)
		if c.tls != nil {
			base = append(base, c.tls.serverLines(port)...)
		}
		return append(base, c.lines...)
	})
	if err != nil {
		t.Fatalf("testserver: starting redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// serverConf is the configuration every server of this package starts
// with (redis-server and sentinel alike): port on loopback, dir, in the
// foreground, logging to standard output.
func serverConf(port int, dir string) []string {
	return []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + quote(dir),
		"daemonize no",
		"logfile \"\"",
		"loglevel notice",
	}
}

// launch picks a free loopback port, writes the configuration lines for it
// into s.Dir/confName and starts the server, trying another port (up to 5
// times) when the one picked was taken meanwhile.
func (s *Redis) launch(confName string, lines func(port int) []string) error {
	return onFreePort(func(port int) error {
		s.Port = port
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.conf = filepath.Join(s.Dir, confName)
		if err := os.WriteFile(s.conf, []byte(strings.Join(lines(port), "\n")+"\n"), 0o600); err != nil {
			return err
		}
		return s.start()
	}, func(err error) bool { return strings.Contains(err.Error(), "Address already in use") })
}

// Binary returns the path of a Redis tool on PATH, or fails the test with
// instructions. Under -short it skips the test instead (SkipShort): every
// Redis process this package starts looks its binary up here.
func Binary(t testing.TB, name string) string {
	t.Helper()
	SkipShort(t, name)
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testserver: %s not found on PATH (%v): install it (Debian: apt-get install redis-server redis-tools) or add it to PATH", name, err)
	}
	return p
}

// onFreePort calls start with a free loopback port, again with another
// one (5 calls at most) while it fails with an error that retry accepts
// (the port was taken meanwhile), and returns start's last error.
func onFreePort(start func(port int) error, retry func(error) bool) error {
	var err error
	for range 5 {
		port, perr := clitest.FreePort()
		if perr != nil {
			return perr
		}
		if err = start(port); err == nil || !retry(err) {
			return err
		}
	}
	return err
}

// start runs the process and waits for "Ready to accept connections" in
// its log (no polling).
func (s *Redis) start() error {
	cmd := exec.Command(s.bin, s.conf)
	cmd.Dir = s.Dir
	// Die with the test process, even if it is killed without cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	log := new(logBuf)
	ready := s.readyLine
	if ready == "" {
		ready = "Ready to accept connections"
	}
	readyCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			log.add(sc.Bytes())
			if !signalled && strings.Contains(sc.Text(), ready) {
				signalled = true
				close(readyCh)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(done)
	}()
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	snapshot := log.String
	select {
	case <-readyCh:
	case <-done:
		return fmt.Errorf("redis-server exited during start; log:\n%s", snapshot())
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server not ready after %v; log:\n%s", StartTimeout, snapshot())
	}
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, log
	s.mu.Unlock()
	return nil
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5s) and waits for
// it to exit. It is idempotent and registered with t.Cleanup by Start.
func (s *Redis) Stop() { s.signal(syscall.SIGTERM) }

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit.
func (s *Redis) Kill() { s.signal(syscall.SIGKILL) }

func (s *Redis) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Pause stops the server with SIGSTOP; Resume continues it.
func (s *Redis) Pause() { s.signalRunning(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Redis) Resume() { s.signalRunning(syscall.SIGCONT) }

func (s *Redis) signalRunning(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart stops the server (if running) and starts it again on the same
// port, directory and config, so persisted data (appendonly yes) survives.
func (s *Redis) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("testserver: restarting redis-server: %v", err)
	}
}

// ClientOption returns rueidis options for this server, with credentials.
func (s *Redis) ClientOption() rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  []string{s.Addr},
		Username:     s.user,
		Password:     s.password,
		DisableCache: true,
	}
	if s.tls != nil {
		opt.TLSConfig = s.tls.ClientConfig()
	}
	return opt
}

// Client returns a new rueidis client for this server, closed at the end of
// the test. edit, if not nil, adjusts the options first.
func (s *Redis) Client(t testing.TB, edit func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, s.ClientOption(), edit, s.Addr)
}

// newClient returns a rueidis client with the options opt, adjusted by
// edit if not nil, closed when the test ends; it fails t if the client
// cannot connect to to (a description of the server).
func newClient(t testing.TB, opt rueidis.ClientOption, edit func(*rueidis.ClientOption), to string) rueidis.Client {
	t.Helper()
	if edit != nil {
		edit(&opt)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("testserver: connecting to %s: %v", to, err)
	}
	t.Cleanup(c.Close)
	return c
}

// CLI runs redis-cli against the server with args and returns its standard
// output. redis-cli must be on PATH (Debian package redis-tools).
func (s *Redis) CLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin := Binary(t, "redis-cli")
	full := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
	if s.user != "" {
		full = append(full, "--user", s.user)
	}
	if s.password != "" {
		full = append(full, "--no-auth-warning", "-a", s.password)
	}
	if s.tls != nil {
		full = append(full, "--tls", "--cacert", s.tls.CAFile)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(full, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// Log returns what the server has logged so far.
func (s *Redis) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

func quote(s string) string { return strconv.Quote(s) }
