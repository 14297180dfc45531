package testserver

import (
	"strings"
	"testing"
	"time"
)

// TestSentinelsElectWithoutSplitVote: of 3 sentinels only the quorum (2)
// detect a down master quickly and may stand for election; the third only
// votes, so an election cannot split 1-1-1 (which delays the failover by
// 2*failover-timeout). The failover after a kill elects a leader at the
// first try.
func TestSentinelsElectWithoutSplitVote(t *testing.T) {
	primary := StartRedis(t)
	StartRedis(t, WithReplicaOf(primary))
	g := StartSentinels(t, primary, 3, SentinelOptions{})
	g.WaitReady(t, 1)

	var downAfter []string
	for _, s := range g.Nodes {
		out, err := s.CLI(t, "SENTINEL", "MASTER", g.MasterName)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Split(strings.TrimSpace(out), "\n")
		for i := 0; i+1 < len(f); i += 2 {
			if f[i] == "down-after-milliseconds" {
				downAfter = append(downAfter, f[i+1])
			}
		}
	}
	if got, want := strings.Join(downAfter, " "), "500 500 20000"; got != want {
		t.Errorf("down-after-milliseconds of the sentinels: %s, want %s", got, want)
	}

	primary.Kill()
	killAt := time.Now()
	deadline := killAt.Add(30 * time.Second)
	for g.MasterAddr(t) == primary.Addr {
		if time.Now().After(deadline) {
			t.Fatalf("no failover 30s after the kill; aborted elections: %d", len(g.Events("-failover-abort-not-elected")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	candidates := g.Events("+try-failover")
	elected := g.Events("+elected-leader")
	aborted := g.Events("-failover-abort-not-elected")
	if len(candidates) > 2 || len(elected) != 1 || len(aborted) != 0 {
		t.Errorf("election: %d candidates (want at most 2), %d leaders elected (want 1), %d aborted elections (want 0)",
			len(candidates), len(elected), len(aborted))
	}
	if len(elected) > 0 {
		t.Logf("%d candidates; leader elected %v after the kill, failover seen by the test after %v",
			len(candidates), elected[0].Sub(killAt).Round(10*time.Millisecond), time.Since(killAt).Round(10*time.Millisecond))
	}
}
