//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgb "github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// pgPassword is the password of the role the CLI tests log in as: a test
// fails if it shows up in any output.
const pgPassword = "pw-S3cr3t-9f2c"

// postgresServer starts a real PostgreSQL whose role "locker" logs in
// over TCP with pgPassword (SCRAM; the superuser keeps trust
// authentication), and returns the admin pool and locker's URL.
func postgresServer(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	s := testserver.StartPostgres(t)
	ctx := t.Context()
	admin, err := pgxpool.New(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `CREATE ROLE locker LOGIN PASSWORD '`+pgPassword+`'; GRANT CREATE, USAGE ON SCHEMA public TO locker`); err != nil {
		t.Fatal(err)
	}
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(s.Dir, "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://locker:%s@127.0.0.1:%d/postgres?sslmode=disable", pgPassword, s.Port)
	// The reload is asynchronous: wait (bounded) until a wrong password is refused.
	wrong := strings.Replace(url, pgPassword, "wrong", 1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := pgxpool.New(ctx, wrong)
		if err == nil {
			err = c.Ping(ctx)
			c.Close()
		}
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pg_hba.conf reloaded, but a wrong password is still accepted after 10s")
		}
	}
	return admin, url
}

// noPassword fails the test if any output of a command shows pgPassword.
func noPassword(t *testing.T, what string, outs ...string) {
	t.Helper()
	for _, o := range outs {
		if strings.Contains(o, pgPassword) {
			t.Errorf("%s: the password is printed:\n%s", what, o)
		}
	}
}

// TestPostgresCLI runs run, inspect and list against a real PostgreSQL
// through --postgres and $FENCEDLOCK_POSTGRES, with a password in the URL:
// the fence comes from the server, COMMAND does not see the URL, and the
// password never appears in any output.
func TestPostgresCLI(t *testing.T) {
	_, url := postgresServer(t)
	env := []string{"FENCEDLOCK_POSTGRES=" + url}
	code, p := bin.Run(t, env, "run", "jobs/a", "--", "/bin/sh", "-c", `test "$FENCEDLOCK_FENCE" = 1 && test -z "$FENCEDLOCK_POSTGRES"`)
	if code != exitOK {
		t.Fatalf("run: exit %d (fence not 1, or COMMAND saw $FENCEDLOCK_POSTGRES); stderr:\n%s", code, p.Stderr)
	}
	noPassword(t, "run", p.Stdout.String(), p.Stderr.String())
	code, p = bin.Run(t, nil, "run", "--postgres", url, "jobs/a", "--", "/bin/sh", "-c", `test "$FENCEDLOCK_FENCE" = 2`)
	if code != exitOK {
		t.Fatalf("second run by flag: exit %d, want fence 2; stderr:\n%s", code, p.Stderr)
	}
	holder := bin.Start(t, env, "run", "--ttl", "30s", "jobs/b", "--", "/bin/sleep", "30")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := bin.Run(t, env, "inspect", "jobs/b"); code == exitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs/b not held 20s after run started; stderr:\n%s", holder.Stderr)
		}
	}
	code, p = bin.Run(t, env, "inspect", "--json", "jobs/a")
	if code != exitFailure || !strings.Contains(p.Stdout.String(), `"held":false`) || !strings.Contains(p.Stdout.String(), `"fence":2`) {
		t.Errorf("inspect jobs/a: exit %d, %s; want free at fence 2 (exit 1)", code, p.Stdout)
	}
	code, p = bin.Run(t, env, "list", "--count", "1", "jobs/")
	out := p.Stdout.String()
	if code != exitOK || !strings.Contains(out, `"jobs/a"`) || !strings.Contains(out, `"jobs/b"`) || !strings.Contains(out, "yes") {
		t.Errorf("list jobs/ (pages of 1): exit %d\n%s\nstderr:\n%s", code, out, p.Stderr)
	}
	noPassword(t, "inspect and list", out, p.Stderr.String())
	code, p = bin.Run(t, env, "list", "--max", "1", "jobs/")
	if code != exitFailure || strings.Count(p.Stdout.String(), `"jobs/`) != 1 {
		t.Errorf("list --max 1: exit %d, want 1 with one lock\n%s", code, p.Stdout)
	}
}

// TestPostgresPasswordRedacted: a wrong password, an unreachable server,
// a malformed URL and a key=value string each fail with the server named
// and the password hidden, with exit 69 (backend) or 64 (usage).
func TestPostgresPasswordRedacted(t *testing.T) {
	_, url := postgresServer(t)
	port := url[strings.LastIndex(url, ":")+1 : strings.LastIndex(url, "/")]
	wrongPW := "postgres://locker:" + pgPassword + "x@127.0.0.1:" + port + "/postgres?sslmode=disable"
	closed := "postgres://locker:" + pgPassword + "@127.0.0.1:1/postgres?sslmode=disable"
	for _, tc := range []struct {
		name, url string
		want      int
	}{
		{"wrong password", wrongPW, exitBackend},
		{"unreachable server", closed, exitBackend},
		{"key=value, wrong password", "host=127.0.0.1 port=" + port + " user=locker password=" + pgPassword + "x dbname=postgres sslmode=disable", exitBackend},
		{"quoted key=value password", "host=127.0.0.1 port=" + port + " user=locker password='" + pgPassword + " x' dbname=postgres sslmode=disable", exitBackend},
		{"malformed port", "postgres://locker:" + pgPassword + "@127.0.0.1:99999/postgres", exitUsage},
		{"bad sslmode", "postgres://locker:" + pgPassword + "@127.0.0.1:" + port + "/postgres?sslmode=bogus", exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{{"inspect", "--postgres", tc.url, "k"}, {"run", "--postgres", tc.url, "k", "--", "true"}} {
				code, p := bin.Run(t, nil, cmd...)
				stderr := p.Stderr.String()
				if code != tc.want || !strings.Contains(stderr, "xxxxx") {
					t.Errorf("%s: exit %d, want %d with the password shown as xxxxx; stderr:\n%s", cmd[0], code, tc.want, stderr)
				}
				noPassword(t, cmd[0], p.Stdout.String(), stderr)
			}
		})
	}
	if got := redactPostgres("postgres://u@h/db?password=" + pgPassword + "&sslmode=disable"); strings.Contains(got, pgPassword) {
		t.Errorf("password in the query: %s", got)
	}
}

// TestPostgresReleaseForce: a real holder (`fencedlock run` on
// PostgreSQL) writes its resource, a row of the fencedlock_kv table, with
// its fence; `release --force --resource` breaks the lock and writes the
// barrier. Then the old holder's next write (its fence and holder id) is
// refused by the KV table, its lock check (CheckTx) fails in its own
// transaction, its run reports the loss at the next renewal (exit 76), and
// a new holder gets a greater fence and writes.
func TestPostgresReleaseForce(t *testing.T) {
	admin, url := postgresServer(t)
	ctx := t.Context()
	env := []string{"FENCEDLOCK_POSTGRES=" + url}
	dir := t.TempDir()
	grant := filepath.Join(dir, "grant")
	const ttl = 6 * time.Second // renewals every 2s
	holder := bin.Start(t, env, "run", "--ttl", ttl.String(), "job", "--", "/bin/sh", "-c",
		`echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+grant+`.tmp && mv `+grant+`.tmp `+grant+` && sleep 60`)
	var fence fencing.Token
	var holderID string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(grant); err == nil {
			f := strings.Fields(string(b))
			n, _ := strconv.ParseUint(f[0], 10, 64)
			fence, holderID = fencing.Token(n), f[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder's command did not start in 20s; stderr:\n%s", holder.Stderr)
		}
	}
	kv, err := pgb.NewKV(ctx, admin, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `GRANT ALL ON fencedlock_kv TO locker`); err != nil {
		t.Fatal(err)
	}
	locks, err := pgb.New(ctx, admin, pgb.Options{SkipCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	// The holder's write, in a transaction that checks its lease.
	write := func(value string) error {
		tx, err := admin.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		if err := locks.CheckTx(ctx, tx, "job", fence); err != nil {
			return err
		}
		if err := kv.In(tx).Set(ctx, "job:resource", value, fence, holderID); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := write("v1"); err != nil {
		t.Fatalf("the holder's write while it holds the lock: %v", err)
	}

	code, p := bin.Run(t, env, "release", "--force", "--resource", "job:resource", "job")
	forcedAt := time.Now()
	audit := p.Stdout.String()
	t.Logf("release --force: %s", audit)
	if code != exitOK {
		t.Fatalf("release --force: exit %d; stderr:\n%s", code, p.Stderr)
	}
	after := fence + 1
	for _, w := range []string{`forced release of "job"`, "was held by holder " + holderID, fmt.Sprintf("fence before %d, after %d", fence, after), `barrier fence ` + strconv.FormatUint(uint64(after), 10) + ` written to ["job:resource"]`} {
		if !strings.Contains(audit, w) {
			t.Errorf("audit line lacks %q", w)
		}
	}
	noPassword(t, "release", audit, p.Stderr.String())

	if err := write("late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("the old holder's checked write after release --force: %v, want ErrNotHeld", err)
	}
	if err := kv.Set(ctx, "job:resource", "late", fence, holderID); !errors.Is(err, fencing.ErrStale) {
		t.Errorf("the old holder's unchecked write after the barrier: %v, want ErrStale", err)
	}
	if r, _ := kv.Get(ctx, "job:resource"); r.Value != "v1" || r.Fence != after {
		t.Errorf("resource after the forced release: %+v, want v1 at fence %d", r, after)
	}
	if code := holder.Wait(ttl + 10*time.Second); code != exitLeaseLost {
		t.Fatalf("holder exited %d, want %d; stderr:\n%s", code, exitLeaseLost, holder.Stderr)
	}
	t.Logf("the holder's run exited 76 %v after release --force returned (TTL %v)", time.Since(forcedAt).Round(time.Millisecond), ttl)
	if !strings.Contains(holder.Stderr.String(), "not held") {
		t.Errorf("the loss is not reported as the server's (not held):\n%s", holder.Stderr)
	}
	code, p = bin.Run(t, env, "run", "job", "--", "/bin/sh", "-c", fmt.Sprintf(`test "$FENCEDLOCK_FENCE" -gt %d`, after))
	if code != exitOK {
		t.Errorf("a new holder after the forced release: exit %d, want a fence above %d; stderr:\n%s", code, after, p.Stderr)
	}
}
