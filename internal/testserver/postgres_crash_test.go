package testserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresKillRestart: Kill leaves no process of the server, a
// connection fails while it is down, and Restart brings it back on the
// same port through crash recovery with every row committed (with
// synchronous_commit=on) before the kill.
func TestPostgresKillRestart(t *testing.T) {
	s := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec := func(sql string) error {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, sql)
		return err
	}
	if err := exec(`SET synchronous_commit = on; CREATE TABLE t (v int); INSERT INTO t VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	pid := s.proc.cmd.Process.Pid
	s.mu.Unlock()
	kids := childrenOf(pid)
	if len(kids) == 0 {
		t.Fatal("the postmaster has no child process to kill")
	}
	s.Kill()
	for _, k := range append(kids, pid) {
		if running(k) {
			t.Errorf("process %d of the server still runs after Kill", k)
		}
	}
	if err := exec(`SELECT 1`); err == nil {
		t.Fatal("a query succeeded on a killed server")
	}
	s.Restart(t)
	if err := exec(`DO $$ BEGIN IF (SELECT v FROM t) IS DISTINCT FROM 42 THEN RAISE 'row lost'; END IF; END $$`); err != nil {
		t.Fatalf("after the restart: %v\n%s", err, s.Log())
	}
}
