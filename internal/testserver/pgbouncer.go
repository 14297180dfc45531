package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Bouncer is a running PgBouncer in transaction pooling mode in front of
// one Postgres, owned by one test.
type Bouncer struct {
	// Port is its TCP port on 127.0.0.1.
	Port int
	user string
	log  string
}

// URL returns the postgres:// URL of database db through the bouncer. It
// asks pgx for the extended protocol without named prepared statements
// (default_query_exec_mode=exec): PgBouncer before 1.21 does not carry
// named statements across the server connections of transaction mode.
func (b *Bouncer) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=exec", b.user, b.Port, db)
}

// Log returns the bouncer's log so far, for failure messages.
func (b *Bouncer) Log() string {
	out, _ := os.ReadFile(b.log)
	return string(out)
}

// StartBouncer starts pgbouncer (from $PATH, Debian package pgbouncer) with
// pool_mode=transaction in front of s, and registers its shutdown with
// t.Cleanup. A missing binary fails the test; it never skips. Like the
// server, it runs as the "postgres" OS user when the test runs as root.
func StartBouncer(t testing.TB, s *Postgres) *Bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		t.Fatalf("testserver: pgbouncer not found on $PATH (%v); install it (Debian: apt-get install pgbouncer, as tools/ci-deps.sh does)", err)
	}
	dir, cred := serverDir(t, "pgbouncer-")
	b := &Bouncer{user: s.User, log: filepath.Join(dir, "pgbouncer.log")}
	users := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(users, []byte(strconv.Quote(s.User)+` ""`+"\n"), 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	err = onFreePort(func(port int) error {
		b.Port = port
		conf := fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, s.Port, b.Port, users, b.log, filepath.Join(dir, "pgbouncer.pid"))
		if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
			return err
		}
		chown(t, cred, dir, ini, users)
		return b.start(t, bin, ini, dir, cred)
	}, func(error) bool { return true })
	if err != nil {
		t.Fatalf("testserver: pgbouncer did not start: %v", err)
	}
	return b
}

func (b *Bouncer) start(t testing.TB, bin, ini, dir string, cred *syscall.Credential) error {
	cmd := exec.Command(bin, ini)
	cmd.Dir = dir
	listening := func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(b.Port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	d, err := startDaemon(cmd, cred, "pgbouncer", 20*time.Second, listening, b.Log)
	if err != nil {
		return err
	}
	t.Cleanup(d.stop)
	return nil
}
