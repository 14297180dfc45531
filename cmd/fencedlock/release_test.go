//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/memory"
)

// TestReleaseForceStopsWritingHolder runs a real holder: `fencedlock run`
// on a real redis-server whose command keeps writing a hash through the
// guard (fenced_write.lua via redis-cli, with $FENCEDLOCK_FENCE and
// $FENCEDLOCK_HOLDER), one write every 50 ms. `fencedlock release --force
// --resource HASH KEY` must make the holder's next guarded write rejected
// (the barrier) and its watchdog report the loss at its next renewal
// (server said not held: run exits 76 well before the lease's TTL).
//
// A write counts as after the forced release when it started after
// release --force returned (the barrier was written by then), not when it
// returned: one sent before the barrier may be applied before it and
// return after it. Classed by when they returned, such a write failed a
// loaded run ("write 4 returned 4.078677ms after the forced release with
// "1": accepted"): its shell took the time only after redis-cli and head
// ended.
func TestReleaseForceStopsWritingHolder(t *testing.T) {
	s, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	script, err := filepath.Abs("../../internal/redisscript/fenced_write.lua")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "writes")
	const ttl = 6 * time.Second // renew interval 2s
	// Each line: the write's number, the script's first reply line (1
	// accepted, 0 rejected) and the time it started, before redis-cli ran
	// (ns).
	loop := fmt.Sprintf(`i=0; while [ $i -lt 2000 ]; do i=$((i+1)); s=$(date +%%s%%N); r=$(redis-cli -u %s --no-auth-warning --eval %s job:resource , "$FENCEDLOCK_FENCE" "$FENCEDLOCK_HOLDER" value "$i" | head -n 1); echo "$i $r $s" >> %s; sleep 0.05; done`,
		url, script, log)
	holder := bin.Start(t, env, "run", "--ttl", ttl.String(), "job", "--", "/bin/sh", "-c", loop)
	// Wait for a few accepted writes.
	deadline := time.Now().Add(20 * time.Second)
	for countWrites(t, log, "1") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the holder made no accepted write in 20s; stderr:\n%s", holder.Stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, p := bin.Run(t, env, "release", "--force", "--resource", "job:resource", "job")
	forcedAt := time.Now()
	t.Logf("release --force: %s", p.Stdout)
	if code != exitOK {
		t.Fatalf("release --force: exit %d; stderr:\n%s", code, p.Stderr)
	}
	audit := p.Stdout.String()
	for _, want := range []string{`forced release of "job" by `, "was held by holder ", "fence before 1, after 2", `barrier fence 2 written to ["job:resource"]`} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit line lacks %q: %s", want, audit)
		}
	}

	// The watchdog: run reports the loss and exits 76 at its next renewal.
	if code := holder.Wait(ttl + 10*time.Second); code != exitLeaseLost {
		t.Fatalf("holder exited %d, want %d; stderr:\n%s", code, exitLeaseLost, holder.Stderr)
	}
	lossAfter := time.Since(forcedAt)
	stderr := holder.Stderr.String()
	t.Logf("holder's run reported the loss and exited %v after release --force returned (renew interval %v, TTL %v); stderr:\n%s", lossAfter.Round(time.Millisecond), ttl/3, ttl, stderr)
	if !strings.Contains(stderr, "not held") {
		t.Errorf("the loss is not reported as the server's (not held):\n%s", stderr)
	}
	// Reported by a renewal (every TTL/3), not by the local deadline: the
	// exit comes before the lease could have run out. The supervisor's
	// own terminate-and-wait adds at most its grace.
	if lossAfter >= ttl {
		t.Errorf("loss reported %v after the forced release, not before the lease's TTL %v: not by a renewal", lossAfter, ttl)
	}

	// Every write that started after release --force returned was rejected.
	var before, after, acceptedAfter int
	for _, w := range readWrites(t, log) {
		if w.started.Before(forcedAt) {
			before++
			continue
		}
		after++
		if w.result != "0" {
			acceptedAfter++
			t.Errorf("write %d started %v after the forced release returned and got %q: accepted", w.n, w.started.Sub(forcedAt), w.result)
		}
	}
	t.Logf("writes: %d started before the forced release returned, %d after it (all rejected: %v)", before, after, acceptedAfter == 0)
	if after == 0 {
		// The holder's next renewal can come before its next write (it
		// renews every TTL/3 from a random phase; a loaded machine slows the
		// loop of date, redis-cli and head): 657 ms after release --force in
		// a loaded run, with no write started in between. Its next write is
		// then the one it would have sent: the same script, fence and holder
		// id, sent now, must be rejected by the barrier.
		m := regexp.MustCompile(`fence 1, holder ([0-9a-f]+)`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("no holder id in the holder's stderr:\n%s", stderr)
		}
		body, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.CLI(t, "EVAL", string(body), "1", "job:resource", "1", m[1], "value", "late")
		if err != nil || strings.TrimSpace(strings.SplitN(r, "\n", 2)[0]) != "0" {
			t.Errorf("the holder made no write after the forced release, and its next write (fence 1, holder %s) sent by the test got %q (%v): want rejected (0)", m[1], r, err)
		} else {
			t.Logf("the holder made no write after the forced release; its next write (fence 1, holder %s), sent by the test, was rejected", m[1])
		}
	}
	hash, err := s.CLI(t, "HGET", "job:resource", "fencedlock:fence")
	if err != nil || strings.TrimSpace(hash) != "2" {
		t.Errorf("the resource's fence record is %q (%v), want the barrier 2", hash, err)
	}

	// The next holder's fence is above the barrier and its write accepted.
	code, p = bin.Run(t, env, "run", "job", "--", "/bin/sh", "-c",
		fmt.Sprintf(`redis-cli -u %s --no-auth-warning --eval %s job:resource , "$FENCEDLOCK_FENCE" "$FENCEDLOCK_HOLDER" value next | head -n 1; echo "fence $FENCEDLOCK_FENCE"`, url, script))
	if code != 0 || !strings.Contains(p.Stdout.String(), "1\nfence 3") {
		t.Errorf("next holder: exit %d, output %q, want its write accepted with fence 3; stderr:\n%s", code, p.Stdout, p.Stderr)
	}
}

// write is one guarded write of the holder's loop.
type write struct {
	n       int
	result  string    // the script's first reply line: 1 accepted, 0 rejected
	started time.Time // before the write was sent
}

func readWrites(t *testing.T, path string) []write {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ws []write
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		n, err1 := strconv.Atoi(f[0])
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		ws = append(ws, write{n, f[1], time.Unix(0, ns)})
	}
	return ws
}

func countWrites(t *testing.T, path, result string) int {
	n := 0
	for _, w := range readWrites(t, path) {
		if w.result == result {
			n++
		}
	}
	return n
}

// TestReleaseForceUsage: --force is required, a backend without
// ForceRelease is a backend error, and --json carries the audit facts.
func TestReleaseForceUsage(t *testing.T) {
	store := memory.NewStore()
	e, _, errb := memEnv(store, nil)
	if code := e.main(context.Background(), []string{"release", "k"}); code != exitUsage || !strings.Contains(errb.String(), "only --force") {
		t.Errorf("release without --force: exit %d, stderr %q", code, errb)
	}
	e, _, errb = memEnv(store, nil)
	if code := e.main(context.Background(), []string{"release", "--force", "k"}); code != exitBackend || !strings.Contains(errb.String(), "cannot force a release") {
		t.Errorf("release --force on the memory backend: exit %d, stderr %q", code, errb)
	}

	_, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	for i, wantAfter := range []uint64{1, 2} {
		code, p := bin.Run(t, env, "release", "--force", "--json", "free")
		if code != exitOK {
			t.Fatalf("release --force --json of a free key: exit %d; stderr:\n%s", code, p.Stderr)
		}
		var rec releaseOutput
		if err := json.Unmarshal([]byte(p.Stdout.String()), &rec); err != nil {
			t.Fatalf("output %q: %v", p.Stdout, err)
		}
		if rec.Key != "free" || rec.Held || rec.Holder != "" || rec.Before != wantAfter-1 || rec.After != wantAfter ||
			!strings.Contains(rec.By, "@") || rec.PID == 0 || len(rec.Operator) != 16 || time.Since(rec.At) > time.Minute {
			t.Errorf("forced release %d of a free key: %+v, want not held, fence %d -> %d, with who and when", i, rec, wantAfter-1, wantAfter)
		}
	}
}
