package etcdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/clitest"
)

// TestEtcdLimitAndLeader, on an in-process 3-member etcd cluster: two
// `run --limit 2` holders at once get distinct FENCEDLOCK_SLOTs, a third
// with --try gets none (75), inspect --limit 2 shows both slots held; and
// inspect --leader shows an election's leader as the Elector reports it.
func TestEtcdLimitAndLeader(t *testing.T) {
	_, eps, admin := cluster(t)
	env := []string{"FENCEDLOCK_ETCD=" + eps}
	slots := map[string]bool{}
	for range 2 {
		file := filepath.Join(t.TempDir(), "slot")
		bin.Start(t, env, "run", "--limit", "2", "--ttl", "5s", "sem", "--", "/bin/sh", "-c",
			`echo "$FENCEDLOCK_SLOT" > `+file+`.tmp; mv `+file+`.tmp `+file+`; exec sleep 30`)
		slots[strings.TrimSpace(clitest.WaitFile(t, file, 30*time.Second))] = true
	}
	if !slots["0"] || !slots["1"] {
		t.Errorf("FENCEDLOCK_SLOT of the two holders: %v, want 0 and 1", slots)
	}
	if code, p := bin.Run(t, env, "run", "--limit", "2", "--try", "sem", "--", "true"); code != exitNotAcquired || !strings.Contains(p.Stderr.String(), `all 2 permits of "sem" are held`) {
		t.Errorf("third holder with --try: exit %d, want %d; stderr:\n%s", code, exitNotAcquired, p.Stderr)
	}
	if code, p := bin.Run(t, env, "inspect", "--limit", "2", "sem"); code != 0 || !strings.Contains(p.Stdout.String(), "2 of 2 permits held") {
		t.Errorf("inspect --limit 2: exit %d, want 0 with both held:\n%s%s", code, p.Stdout, p.Stderr)
	}

	b := newBackend(t, admin)
	el, err := election.New(b, fencedlock.Options{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := el.Campaign(ctx, "primary", []byte("node-1:8080"))
	if err != nil {
		t.Fatal(err)
	}
	got := runJSON[struct {
		Election, Value, Holder string
		Held                    bool
		Fence                   uint64
		TTLms                   int64 `json:"ttl_ms"`
	}](t, env, "inspect", "--leader", "--json", "primary")
	if !got.Held || got.Election != "primary" || got.Value != "node-1:8080" || got.Fence != uint64(term.Fence()) || got.Holder != term.Holder() || got.TTLms <= 0 {
		t.Errorf("inspect --leader: %+v; the term: fence %v, holder %s", got, term.Fence(), term.Holder())
	}
	// list shows the election as its lock (holder and term fence; the value is inspect --leader's).
	if code, p := bin.Run(t, env, "list", "--json", "primary"); code != 0 || strings.TrimSpace(p.Stdout.String()) !=
		fmt.Sprintf(`{"key":"primary","held":true,"holder":"%s","ttl_ms":%d,"fence":%d}`, term.Holder(), lineTTL(t, p.Stdout.String()), term.Fence()) {
		t.Errorf("list primary: exit %d, want the election's lock alone:\n%s%s", code, p.Stdout, p.Stderr)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if code, p := bin.Run(t, env, "inspect", "--leader", "primary"); code != 1 || !strings.Contains(p.Stdout.String(), "leader:   none") {
		t.Errorf("after Resign: exit %d, want 1 and no leader:\n%s%s", code, p.Stdout, p.Stderr)
	}
}

// lineTTL returns the ttl_ms of a one-line JSON listing (it varies).
func lineTTL(t *testing.T, line string) int64 {
	t.Helper()
	var o struct {
		TTLms int64 `json:"ttl_ms"`
	}
	if err := json.Unmarshal([]byte(line), &o); err != nil {
		t.Fatalf("%v: %q", err, line)
	}
	return o.TTLms
}
