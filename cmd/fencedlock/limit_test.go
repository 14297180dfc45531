//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// holdMemPermit takes a permit of the semaphore name of limit on store for
// another holder, with a 5s TTL; its Semaphore is closed when the test ends.
func holdMemPermit(t *testing.T, store *memory.Store, name string, limit int) *semaphore.Permit {
	t.Helper()
	s := locktest.Open(t, store.Backend(), fencedlock.Options{TTL: 5 * time.Second}, semaphore.New)
	p, err := s.TryAcquire(context.Background(), name, limit)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunLimitMemory: run --limit 2 takes the permit another holder left
// free and gives COMMAND KEY, the slot and the slot's fence; with both
// permits held --try and --wait give up naming the semaphore; inspect
// --limit shows each slot and answers 0 only when none is free.
func TestRunLimitMemory(t *testing.T) {
	store := memory.NewStore()
	other := holdMemPermit(t, store, "jobs", 2)
	envFile := filepath.Join(t.TempDir(), "env")
	e, _, errb := memEnv(store, nil)
	args := append([]string{"run", "--limit", "2", "jobs"}, shell(`echo "$FENCEDLOCK_KEY $FENCEDLOCK_SLOT $FENCEDLOCK_FENCE" > `+envFile)...)
	if code := e.main(context.Background(), args); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	free := 1 - other.Slot()
	if got, want := strings.TrimSpace(string(b)), "jobs "+[]string{"0", "1"}[free]+" 1"; got != want {
		t.Errorf("command saw FENCEDLOCK_KEY/SLOT/FENCE = %q, want %q", got, want)
	}
	if want := `acquired "` + semaphore.SlotKey("jobs", free) + `": fence 1`; !strings.Contains(errb.String(), want) {
		t.Errorf("progress does not say %q:\n%s", want, errb)
	}

	holdMemPermit(t, store, "jobs", 2) // both permits held now
	marker := filepath.Join(t.TempDir(), "ran")
	e, _, errb = memEnv(store, nil)
	if code := e.main(context.Background(), append([]string{"run", "--limit", "2", "--try", "jobs"}, shell("touch "+marker)...)); code != exitNotAcquired ||
		!strings.Contains(errb.String(), `all 2 permits of "jobs" are held (the soonest lease ends in`) {
		t.Errorf("--try: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, errb)
	}
	e, _, errb = memEnv(store, nil)
	if code := e.main(context.Background(), append([]string{"run", "--limit", "2", "--wait", "300ms", "jobs"}, shell("touch "+marker)...)); code != exitNotAcquired ||
		!strings.Contains(errb.String(), `waiting for one of 2 permits of "jobs": all held`) || !strings.Contains(errb.String(), "--wait 300ms expired") {
		t.Errorf("--wait: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, errb)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran without a permit")
	}

	e, out, errb := memEnv(store, nil)
	if code := e.main(context.Background(), []string{"inspect", "--limit", "2", "jobs"}); code != exitOK {
		t.Errorf("inspect --limit 2 with both held: exit %d, want 0; stderr:\n%s", code, errb)
	}
	if !strings.Contains(out.String(), other.Holder()) || !strings.Contains(out.String(), "2 of 2 permits held") || !strings.Contains(out.String(), `fencedlock list "jobs/permit/"`) {
		t.Errorf("inspect --limit 2 output:\n%s", out)
	}
	e, out, errb = memEnv(store, nil)
	if code := e.main(context.Background(), []string{"inspect", "--json", "--limit", "3", "jobs"}); code != exitFailure {
		t.Errorf("inspect --limit 3 with slot 2 free: exit %d, want 1; stderr:\n%s", code, errb)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("inspect --json --limit 3: %d lines, want 3:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var p permitOutput
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		if p.Semaphore != "jobs" || p.Slot != i || p.Key != semaphore.SlotKey("jobs", i) || p.Held != (i < 2) {
			t.Errorf("line %d: %+v", i, p)
		}
		if i == other.Slot() && (p.Holder != other.Holder() || p.Fence != uint64(other.Fence())) {
			t.Errorf("slot %d: %+v, want holder %s fence %v", i, p, other.Holder(), other.Fence())
		}
	}
}

func TestLimitUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--limit", "0", "k", "--", "true"}, "--limit 0 outside [1, 1024]"},
		{[]string{"run", "--limit", "1025", "k", "--", "true"}, "--limit 1025 outside"},
		{[]string{"run", "--limit", "10", strings.Repeat("k", fencedlock.MaxKeyLen-8), "--", "true"}, "exceeds MaxKeyLen"},
		{[]string{"inspect", "--limit", "-1", "k"}, "--limit -1 outside"},
		{[]string{"inspect", "--limit", "2", "--watch", "k"}, "--watch, --limit and --leader exclude each other"},
	} {
		e, _, errb := memEnv(memory.NewStore(), nil)
		if code := e.main(context.Background(), tc.args); code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, want %d saying %q; stderr:\n%s", tc.args, code, exitUsage, tc.want, errb)
		}
	}
}

// startPermitHolder runs `fencedlock run --limit 2 --ttl ttl sem` with a
// command that writes its slot and fence to a file and sleeps 30s; it
// returns the process and, once the command runs, its slot, fence and pid.
func startPermitHolder(t *testing.T, env []string, ttl time.Duration) (p *clitest.Proc, slot, fence, pid string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "permit")
	p = bin.Start(t, env, "run", "--limit", "2", "--ttl", ttl.String(), "sem", "--", "/bin/sh", "-c",
		`echo "$FENCEDLOCK_SLOT $FENCEDLOCK_FENCE $FENCEDLOCK_KEY $$" > `+file+`.tmp; mv `+file+`.tmp `+file+`; exec sleep 30`)
	f := strings.Fields(clitest.WaitFile(t, file, 20*time.Second))
	if len(f) != 4 || f[2] != "sem" {
		t.Fatalf("the command wrote %q, want its slot, fence, FENCEDLOCK_KEY sem and pid", f)
	}
	return p, f[0], f[1], f[3]
}

// TestRunLimitRedis, against a real redis-server: two `run --limit 2`
// holders at once, with distinct FENCEDLOCK_SLOT; a third waits; when
// one holder's fencedlock is killed (SIGKILL) its supervisor ends its
// command and its slot comes back at the TTL: the waiter gets that slot
// with a greater fence, and the killed holder's command is gone by then; inspect and list
// show the slot locks; a holder whose slot lock is deleted on the server
// has its command ended by the supervision (exit 76).
func TestRunLimitRedis(t *testing.T) {
	srv, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	const ttl = 5 * time.Second // the kill switch of a holder fires only if a renewal is ~1.6s late
	a, slotA, fenceA, pidA := startPermitHolder(t, env, ttl)
	b, slotB, _, _ := startPermitHolder(t, env, ttl)
	if slotA == slotB || (slotA != "0" && slotA != "1") || (slotB != "0" && slotB != "1") {
		t.Fatalf("FENCEDLOCK_SLOT of the two holders: %q and %q, want 0 and 1", slotA, slotB)
	}
	if code, p := bin.Run(t, env, "run", "--limit", "2", "--try", "sem", "--", "true"); code != exitNotAcquired {
		t.Errorf("third holder with --try: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, p.Stderr)
	}
	code, insp := bin.Run(t, env, "inspect", "--limit", "2", "sem")
	if code != exitOK || strings.Count(insp.Stdout.String(), " yes ") != 2 {
		t.Errorf("inspect --limit 2: exit %d, want 0 and two held slots:\n%s%s", code, insp.Stdout, insp.Stderr)
	}
	code, list := bin.Run(t, env, "list", "--json", "sem/permit/")
	if code != exitOK || strings.Count(list.Stdout.String(), `"held":true`) != 2 || !strings.Contains(list.Stdout.String(), `"key":"sem/permit/`+slotA+`"`) {
		t.Errorf("list sem/permit/: exit %d, want both slot locks held:\n%s%s", code, list.Stdout, list.Stderr)
	}

	// The waiter: it gets A's slot once A's fencedlock is killed and the slot's TTL ran out.
	cFile := filepath.Join(t.TempDir(), "c")
	c := bin.Start(t, env, "run", "--limit", "2", "--ttl", ttl.String(), "sem", "--", "/bin/sh", "-c", `a=alive; kill -0 `+pidA+` 2>/dev/null || a=gone; echo "$FENCEDLOCK_SLOT $FENCEDLOCK_FENCE $a" > `+cFile+`.tmp; mv `+cFile+`.tmp `+cFile)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(cFile); err == nil {
		t.Fatalf("a third holder ran while both permits were held")
	}
	killedAt := time.Now()
	if err := a.Cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	got := strings.Fields(clitest.WaitFile(t, cFile, ttl+20*time.Second))
	t.Logf("the waiter ran %v after the holder of slot %s was killed (TTL %v)", time.Since(killedAt), slotA, ttl)
	if len(got) != 3 || got[0] != slotA || atoi(t, got[1]) <= atoi(t, fenceA) {
		t.Fatalf("the waiter got slot/fence %q, want slot %s with a fence above %s", got, slotA, fenceA)
	}
	if got[2] != "gone" {
		t.Errorf("the killed holder's command (pid %s) still ran when the waiter's started on its slot", pidA)
	}
	if code := c.Wait(20 * time.Second); code != 0 {
		t.Errorf("waiter: exit %d; stderr:\n%s", code, c.Stderr)
	}

	// Loss: B's slot lock deleted on the server; supervision ends B's command.
	client := srv.Client(t, nil)
	if n, err := client.Do(context.Background(), client.B().Del().Key(lockKey(semaphore.SlotKey("sem", atoi(t, slotB)))).Build()).AsInt64(); err != nil || n != 1 {
		t.Fatalf("DEL of slot %s's lock: %d, %v", slotB, n, err)
	}
	if code := b.Wait(ttl + 20*time.Second); code != exitLeaseLost || !strings.Contains(b.Stderr.String(), `lease on "sem/permit/`+slotB+`" lost`) {
		t.Errorf("holder of the deleted slot: exit %d, want %d reporting the loss; stderr:\n%s", code, exitLeaseLost, b.Stderr)
	}
}

// campaignJobs wins the election "jobs" with the value "node-1:8080"
// through an Election (TTL 5s) on b; the Election, then b, are closed in
// t.Cleanup.
func campaignJobs(t *testing.T, b driver.Backend) *election.Term {
	t.Helper()
	el := locktest.Open(t, b, fencedlock.Options{TTL: 5 * time.Second}, election.New)
	term, err := el.Campaign(context.Background(), "jobs", []byte("node-1:8080"))
	if err != nil {
		t.Fatal(err)
	}
	return term
}

// wantLeader fails t unless out, what inspect --leader jobs printed,
// shows term (campaignJobs's) and has the lines beginning with more.
func wantLeader(t *testing.T, out string, term *election.Term, more ...string) {
	t.Helper()
	for _, want := range append([]string{`election: "jobs"`, `value:    "node-1:8080"`, "fence:    " + term.Fence().String(), "holder:   " + term.Holder()}, more...) {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInspectLeaderMemory: inspect --leader shows an election's leader
// (value, term fence, holder, TTL) on a backend that holds elections
// (backend/memory), as text and JSON; exit 1 once the leader resigned.
func TestInspectLeaderMemory(t *testing.T) {
	store := memory.NewStore()
	ctx := context.Background()
	term := campaignJobs(t, store.Backend())
	e, out, errb := memEnv(store, nil)
	if code := e.main(ctx, []string{"inspect", "--leader", "jobs"}); code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errb)
	}
	wantLeader(t, out.String(), term, "ttl:")
	e, out, errb = memEnv(store, nil)
	if code := e.main(ctx, []string{"inspect", "--leader", "--json", "jobs"}); code != exitOK {
		t.Fatalf("--json: exit %d, want 0; stderr:\n%s", code, errb)
	}
	var got leaderOutput
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !got.Held || got.Election != "jobs" || got.Value != "node-1:8080" || got.Fence != uint64(term.Fence()) || got.Holder != term.Holder() || got.TTLms <= 0 || got.TTLms > 5000 {
		t.Errorf("--json: %+v", got)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	e, out, errb = memEnv(store, nil)
	if code := e.main(ctx, []string{"inspect", "--leader", "jobs"}); code != exitFailure || !strings.Contains(out.String(), "leader:   none") {
		t.Errorf("after Resign: exit %d, want 1 and no leader; out:\n%s%s", code, out, errb)
	}
}

// TestInspectLeaderRedis: Redis holds elections (driver.Elector on both
// clients): against a real redis-server, inspect --leader shows the term a
// process won through backend/redis, and exits 1 once it resigned.
func TestInspectLeaderRedis(t *testing.T) {
	s, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	b, err := redisb.New(s.Client(t, nil), redisb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	term := campaignJobs(t, b)
	code, p := bin.Run(t, env, "inspect", "--leader", "jobs")
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, p.Stderr)
	}
	wantLeader(t, p.Stdout.String(), term)
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	code, p = bin.Run(t, env, "inspect", "--leader", "jobs")
	if code != exitFailure || !strings.Contains(p.Stdout.String(), "leader:   none") {
		t.Errorf("after Resign: exit %d, want 1 and no leader; out:\n%s%s", code, p.Stdout, p.Stderr)
	}
}

// TestInspectLeaderPostgres: PostgreSQL holds no elections (no
// driver.Elector): inspect --leader says so and exits 69, against a real
// server.
func TestInspectLeaderPostgres(t *testing.T) {
	_, url := postgresServer(t)
	code, p := bin.Run(t, []string{"FENCEDLOCK_POSTGRES=" + url}, "inspect", "--leader", "jobs")
	if code != exitBackend || !strings.Contains(p.Stderr.String(), "holds no elections") || p.Stdout.String() != "" {
		t.Errorf("exit %d, want %d saying the backend holds no elections; stdout %q, stderr:\n%s", code, exitBackend, p.Stdout, p.Stderr)
	}
}
