package testserver

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestStartStop starts a server, checks that it accepts TCP connections on
// its port and that its socket exists, and that the cleanup stops it.
func TestStartStop(t *testing.T) {
	SkipShort(t, "PostgreSQL") // the checks after the subtest need its server
	var s *Postgres
	t.Run("start", func(t *testing.T) {
		s = StartPostgres(t)
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 2*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v\nlog:\n%s", s.Port, err, s.Log())
		}
		c.Close()
		sock := s.Dir + "/.s.PGSQL." + strconv.Itoa(s.Port)
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("unix socket: %v", err)
		}
		if want := "host=127.0.0.1 port=" + strconv.Itoa(s.Port) + " user=postgres dbname=postgres sslmode=disable"; s.DSN() != want {
			t.Fatalf("DSN = %q, want %q", s.DSN(), want)
		}
	})
	// The subtest's cleanup has stopped the server and removed its directory.
	if _, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), time.Second); err == nil {
		t.Fatalf("server still listening on %d after cleanup", s.Port)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s not removed: %v", s.Dir, err)
	}
}
