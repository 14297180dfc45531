// Package pgtest starts a throwaway PostgreSQL server for tests: initdb in a
// temporary directory, postgres listening on a free 127.0.0.1 port (and a
// unix socket in the same directory), stopped and removed in t.Cleanup.
//
// The server binaries are looked up in $PGTEST_BINDIR, then in
// /usr/lib/postgresql/{17,16,15}/bin, then on $PATH. A missing binary fails
// the test with an actionable message; it never skips. PostgreSQL refuses to
// run as root, so when the test runs as root the server runs as the
// "postgres" OS user (its data directory is chowned to that user).
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a running PostgreSQL server owned by one test.
type Server struct {
	// Dir is the temporary directory holding the data directory, the
	// socket and the server log.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// User is the superuser role (trust authentication, no password).
	User string

	cmd    *exec.Cmd
	exited chan error // receives the server's exit status once
	log    string
}

// DSN returns a libpq key/value connection string for database "postgres"
// over TCP, usable with github.com/lib/pq and pgx's stdlib driver.
func (s *Server) DSN() string { return s.DSNFor("postgres") }

// DSNFor returns the DSN of database db on this server.
func (s *Server) DSNFor(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", s.Port, s.User, db)
}

// URL returns the server's postgres:// URL for database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// Log returns the server log so far, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// BinDir returns the directory holding initdb, postgres and pg_isready, or
// an error saying how to install them.
func BinDir() (string, error) {
	var candidates []string
	if d := os.Getenv("PGTEST_BINDIR"); d != "" {
		candidates = append(candidates, d)
	}
	for _, v := range []string{"17", "16", "15"} {
		candidates = append(candidates, filepath.Join("/usr/lib/postgresql", v, "bin"))
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) && isExec(filepath.Join(d, "pg_isready")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) && isExec(filepath.Join(d, "pg_isready")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: PostgreSQL server binaries (initdb, postgres, pg_isready) not found in %s or $PATH; "+
		"install them (Debian: apt-get install postgresql-15) or set PGTEST_BINDIR to their directory", strings.Join(candidates, ", "))
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start starts a new server and registers its shutdown with t.Cleanup. It
// fails the test if the server cannot be started.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	logPath := filepath.Join(dir, "postgres.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if cred != nil {
		for _, p := range []string{dir, data, logPath} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatalf("pgtest: chown %s to the postgres user: %v", p, err)
			}
		}
	}

	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb failed: %v\n%s", err, out)
	}

	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		s := &Server{Dir: dir, Port: port, User: "postgres", log: logPath}
		if lastErr = s.start(bin, data, cred); lastErr == nil {
			t.Cleanup(s.stop)
			return s
		}
	}
	t.Fatalf("pgtest: postgres did not start: %v", lastErr)
	return nil
}

func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses to run as root, but there is no \"postgres\" OS user to run it as (%v); create one (useradd -r postgres) or run the tests as another user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: bad uid/gid %q/%q for user postgres", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(bin, data string, cred *syscall.Credential) error {
	logf, err := os.OpenFile(s.log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.Dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
	)
	cmd.Dir = s.Dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Pdeathsig: the server dies with the test binary even if the cleanup
	// never runs (a panic, a killed test).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("postgres exited during startup: %v\n%s", err, s.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ready := exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-q",
			"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", s.User, "-d", "postgres")
		err := ready.Run()
		cancel()
		if err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("postgres not ready after 30s\n%s", s.Log())
}

// stop shuts the server down (fast shutdown: SIGINT), killing it if it has
// not exited after 10 seconds.
func (s *Server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		return
	case <-time.After(10 * time.Second):
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}
