package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Postgres is a running PostgreSQL server owned by one test.
type Postgres struct {
	// Dir is the temporary directory holding the data directory, the
	// socket and the server log.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// User is the superuser role (trust authentication, no password).
	User string

	mu   sync.Mutex // guards proc (Kill, Restart, stop)
	proc *daemon    // nil while killed
	log  string
	// bin, data and cred start it again (Restart).
	bin, data string
	cred      *syscall.Credential
}

// DSN returns a libpq key/value connection string for database "postgres"
// over TCP, usable with github.com/lib/pq and pgx's stdlib driver.
func (s *Postgres) DSN() string { return s.DSNFor("postgres") }

// DSNFor returns the DSN of database db on this server.
func (s *Postgres) DSNFor(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", s.Port, s.User, db)
}

// URL returns the server's postgres:// URL for database db.
func (s *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// Log returns the server log so far, for failure messages.
func (s *Postgres) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// PostgresBinDir returns the directory holding initdb, postgres and pg_isready, or
// an error saying how to install them.
func PostgresBinDir() (string, error) {
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
	return "", fmt.Errorf("testserver: PostgreSQL server binaries (initdb, postgres, pg_isready) not found in %s or $PATH; "+
		"install them (Debian: apt-get install postgresql-15) or set PGTEST_BINDIR to their directory", strings.Join(candidates, ", "))
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// StartPostgres starts a new PostgreSQL server and registers its shutdown with t.Cleanup. It
// fails the test if the server cannot be started.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	SkipShort(t, "PostgreSQL")
	bin, err := PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir, cred := serverDir(t, "testserver-pg-")
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	logPath := filepath.Join(dir, "postgres.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	chown(t, cred, dir, data, logPath)

	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testserver: initdb failed: %v\n%s", err, out)
	}

	var s *Postgres
	err = onFreePort(func(port int) error {
		s = &Postgres{Dir: dir, Port: port, User: "postgres", log: logPath, bin: bin, data: data, cred: cred}
		return s.start(bin, data, cred)
	}, func(error) bool { return true })
	if err != nil {
		t.Fatalf("testserver: postgres did not start: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// serverDir returns a new directory for a server's files, readable by
// all and removed in t.Cleanup, and the credential the server runs with:
// nil (this process's user), or the "postgres" OS user when the test runs
// as root (PostgreSQL refuses to run as root).
func serverDir(t testing.TB, prefix string) (string, *syscall.Credential) {
	t.Helper()
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return dir, cred
}

// chown gives paths to cred's user; with a nil cred it does nothing.
func chown(t testing.TB, cred *syscall.Credential, paths ...string) {
	t.Helper()
	if cred == nil {
		return
	}
	for _, p := range paths {
		if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("testserver: chown %s to the postgres user: %v", p, err)
		}
	}
}

func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testserver: running as root, and PostgreSQL refuses to run as root, but there is no \"postgres\" OS user to run it as (%v); create one (useradd -r postgres) or run the tests as another user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testserver: bad uid/gid %q/%q for user postgres", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Postgres) start(bin, data string, cred *syscall.Credential) error {
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
	ready := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return exec.CommandContext(ctx, filepath.Join(bin, "pg_isready"), "-q",
			"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", s.User, "-d", "postgres").Run() == nil
	}
	d, err := startDaemon(cmd, cred, "postgres", 30*time.Second, ready, s.Log)
	if err != nil {
		return err
	}
	s.proc = d
	return nil
}

// stop shuts the server down (fast shutdown: SIGINT), killing it if it has
// not exited after 10 seconds.
func (s *Postgres) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil { // nil: killed and not restarted
		s.proc.stop()
	}
}
