package chaos

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// runWorkerEvents runs one worker in this process against srv until its
// rounds are done and returns the events it sent.
func runWorkerEvents(t *testing.T, cfg WorkerConfig) []Event {
	t.Helper()
	var out bytes.Buffer
	// An open stdin: the worker stops at MaxRounds, not at its stop signal.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := RunWorker(cfg, r, &out); err != nil {
		t.Fatal(err)
	}
	var events []Event
	dec := json.NewDecoder(&out)
	for dec.More() {
		var e Event
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

// TestWorkerRecordsRenewals: a worker whose critical sections outlast the
// renew interval records its renewals (OpRenew, each deadline later than
// the one before and than the grant's), and its release carries the
// latest, so the checker counts each lease valid until its last known
// deadline.
func TestWorkerRecordsRenewals(t *testing.T) {
	s := newRedisSetup(t, "renewals", false)
	ttl := 300 * time.Millisecond
	cfg := WorkerConfig{ID: 0, Lock: LockRedis, RedisAddr: s.srv.Addr, Register: RegisterRedis, TTL: ttl,
		LockKey: "renewals", RegKey: "chaos:register:renewals", Work: 4 * ttl, Seed: 1, MaxRounds: 4, MaxTime: time.Minute}
	events := runWorkerEvents(t, cfg)
	h, err := BuildHistory(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Renewals) == 0 {
		t.Fatalf("no renewal recorded in 4 rounds of up to %v of work with a TTL of %v", cfg.Work, ttl)
	}
	last := map[string]int64{}
	for _, o := range h.Ops {
		if o.Op == OpAcquire && o.Phase == OK {
			last[o.Holder] = o.Deadline
		}
	}
	for _, e := range h.Renewals {
		if e.Deadline <= last[e.Holder] {
			t.Fatalf("renewal of %s at %d: deadline %d not after %d", e.Holder, e.T, e.Deadline, last[e.Holder])
		}
		last[e.Holder] = e.Deadline
	}
	extended := 0
	for _, l := range Leases(h) {
		for _, o := range h.Ops {
			if o.Op == OpAcquire && o.Phase == OK && o.Holder == l.Holder && l.End > o.Deadline {
				extended++
			}
		}
	}
	if extended == 0 {
		t.Fatalf("%d renewals, but no lease counted valid past its first deadline: %+v", len(h.Renewals), Leases(h))
	}
	t.Logf("%d renewals; %d of %d leases valid past their first deadline", len(h.Renewals), extended, len(Leases(h)))
}
