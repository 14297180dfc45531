package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// w returns the attempt and outcome events of one read-modify-write
// increment of key by proc with fence and holder: read base, write base+1.
func w(proc string, fence fencing.Token, holder, base, value string, accepted bool) []Event {
	a := Event{Proc: proc, Kind: Attempt, Key: "c", Fence: fence, Holder: holder, Value: value, RMW: true, Base: base}
	o := a
	o.Kind = Rejected
	if accepted {
		o.Kind = Accepted
	}
	return []Event{a, o}
}

func hist(parts ...[]Event) []Event {
	var h []Event
	for _, p := range parts {
		h = append(h, p...)
	}
	return h
}

func final(v string) []Event { return []Event{{Proc: "parent", Kind: Final, Key: "c", Value: v}} }

func TestCheckGoodHistories(t *testing.T) {
	cases := []struct {
		name string
		h    []Event
		want Result
	}{
		{"empty", nil, Result{}},
		{"sequential holders", hist(
			[]Event{{Proc: "p1", Kind: Acquire, Key: "c", Fence: 1, Holder: "A"}},
			w("p1", 1, "A", "0", "1", true),
			w("p1", 1, "A", "1", "2", true), // equal fence, same holder
			w("p2", 2, "B", "2", "3", true),
			final("3"),
		), Result{Attempted: 3, Accepted: 3}},
		{"paused holder rejected", hist(
			w("p1", 1, "A", "0", "1", true),
			w("p2", 2, "B", "1", "2", true),
			w("p3", 3, "C", "2", "3", true),
			w("p1", 1, "A", "1", "2", false), // the paused one, rejected
			w("p2", 3, "B", "3", "4", false), // duplicated fence, other holder, rejected
			final("3"),
		), Result{Attempted: 5, Accepted: 3, Rejected: 2}},
		{"fence gaps", hist(
			w("p1", 5, "A", "0", "1", true),
			w("p2", 90, "B", "1", "2", true),
			final("2"),
		), Result{Attempted: 2, Accepted: 2}},
		{"interleaved processes", hist(
			[]Event{
				{Proc: "p1", Kind: Attempt, Key: "c", Fence: 1, Holder: "A", Value: "1", RMW: true, Base: "0"},
				{Proc: "p2", Kind: Attempt, Key: "c", Fence: 2, Holder: "B", Value: "x"},
				{Proc: "p1", Kind: Accepted, Key: "c", Fence: 1, Holder: "A", Value: "1", RMW: true, Base: "0"},
				{Proc: "p2", Kind: Accepted, Key: "c", Fence: 2, Holder: "B", Value: "x"},
			},
			final("x"),
		), Result{Attempted: 2, Accepted: 2}},
	}
	for _, tc := range cases {
		got := Check(tc.h, Options{Initial: "0"})
		if err := got.Err(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got.Attempted != tc.want.Attempted || got.Accepted != tc.want.Accepted || got.Rejected != tc.want.Rejected {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// The counter rule on a clean counter.
	h := hist(w("p1", 1, "A", "0", "1", true), w("p2", 2, "B", "1", "2", true), final("2"))
	if err := Check(h, Options{Initial: "0", Counter: true}).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckBadHistories(t *testing.T) {
	cases := []struct {
		name  string
		h     []Event
		opts  Options
		rules []string // every one must be reported, and nothing else
	}{
		{"paused holder's write accepted (no fencing)", hist(
			w("p1", 1, "A", "0", "1", true),
			w("p2", 2, "B", "1", "2", true),
			w("p1", 1, "A", "1", "2", true), // late write of the paused holder
			final("2"),
		), Options{Initial: "0", Counter: true}, []string{RuleStale, RuleLostUpdate, RuleCounter}},
		{"duplicated fence accepted from another holder", hist(
			w("p1", 7, "A", "0", "1", true),
			w("p2", 7, "B", "1", "2", true),
			final("2"),
		), Options{Initial: "0"}, []string{RuleDuplicate}},
		{"lost update with increasing fences", hist(
			w("p1", 1, "A", "0", "1", true),
			w("p2", 2, "B", "0", "1", true), // B read before A's write landed
			final("1"),
		), Options{Initial: "0", Counter: true}, []string{RuleLostUpdate, RuleCounter}},
		{"final state differs", hist(
			w("p1", 1, "A", "0", "1", true),
			final("5"),
		), Options{Initial: "0"}, []string{RuleFinal}},
		{"rejected write applied anyway", hist(
			w("p1", 2, "A", "0", "1", true),
			w("p2", 1, "B", "1", "2", false),
			final("2"), // the state shows the rejected value
		), Options{Initial: "0", Counter: true}, []string{RuleFinal, RuleCounter}},
		{"counter not a number", hist(
			w("p1", 1, "A", "0", "1", true),
			final("one"),
		), Options{Initial: "0", Counter: true}, []string{RuleFinal, RuleCounter}},
		{"outcome without attempt", []Event{
			{Proc: "p1", Kind: Accepted, Key: "c", Fence: 1, Holder: "A", Value: "1"},
		}, Options{Initial: "0"}, []string{RuleOutcome}},
		{"outcome of another write", []Event{
			{Proc: "p1", Kind: Attempt, Key: "c", Fence: 1, Holder: "A", Value: "1"},
			{Proc: "p1", Kind: Accepted, Key: "c", Fence: 2, Holder: "A", Value: "1"},
		}, Options{Initial: "0"}, []string{RuleOutcome}},
		{"attempt without outcome", hist(
			[]Event{{Proc: "p1", Kind: Attempt, Key: "c", Fence: 1, Holder: "A", Value: "1"}},
			w("p1", 2, "A", "0", "1", true),
			[]Event{{Proc: "p2", Kind: Attempt, Key: "c", Fence: 3, Holder: "B", Value: "1"}},
		), Options{Initial: "0"}, []string{RuleOutcome, RuleOutcome}},
	}
	for _, tc := range cases {
		res := Check(tc.h, tc.opts)
		err := res.Err()
		if err == nil {
			t.Errorf("%s: no violation found", tc.name)
			continue
		}
		var got []string
		for _, v := range res.Violations {
			got = append(got, v.Rule)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.rules) {
			t.Errorf("%s: violations %q, want %q\n%v", tc.name, got, tc.rules, err)
		}
		for _, r := range tc.rules {
			if !res.Has(r) || !strings.Contains(err.Error(), r) {
				t.Errorf("%s: %q missing from %v", tc.name, r, err)
			}
		}
	}
}

// TestRecorderConcurrentAppends: recorders of one file in many goroutines
// (each with its own file descriptor, as separate processes have) append
// whole lines only.
func TestRecorderConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history")
	const procs, each = 8, 200
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		r, err := Open(path, fmt.Sprintf("p%d", p))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for i := 0; i < each; i++ {
				if err := r.Record(Event{Kind: Read, Key: "c", Fence: fencing.Token(i + 1), Value: strings.Repeat("x", 300)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	events, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != procs*each {
		t.Fatalf("%d events, want %d", len(events), procs*each)
	}
	next := make(map[string]fencing.Token)
	for _, e := range events {
		if e.Fence != next[e.Proc]+1 || e.Time.IsZero() {
			t.Fatalf("event %+v out of order for its process", e)
		}
		next[e.Proc] = e.Fence
	}
	r, _ := Open(path, "x")
	r.Close()
	if err := r.Record(Event{Kind: Read}); err == nil {
		t.Fatal("Record after Close succeeded")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReadFileErrors(t *testing.T) {
	if _, err := ReadFile(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("missing file: no error")
	}
	path := filepath.Join(t.TempDir(), "h")
	if err := os.WriteFile(path, []byte("{\"kind\":\"read\"}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("malformed line: %v", err)
	}
}

// TestFinish drives the helpers a paused-holder workload ends with: count
// the workers' accepted writes while the file grows, append the final
// state, find the victim's write, check.
func TestFinish(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if n := AcceptedBy(path, "worker"); n != 0 {
		t.Fatalf("AcceptedBy on a missing file = %d, want 0", n)
	}
	recs := map[string]*Recorder{}
	for _, proc := range []string{"victim", "worker0", "worker1"} {
		r, err := Open(path, proc)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		recs[proc] = r
	}
	write := func(proc string, fence fencing.Token, base, value string, accepted bool) {
		t.Helper()
		for _, e := range w(proc, fence, proc, base, value, accepted) {
			if err := recs[proc].Record(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("victim", 1, "0", "1", true)
	write("worker0", 2, "1", "2", true)
	write("worker1", 3, "2", "3", true)
	write("victim", 1, "1", "2", false)
	write("worker0", 4, "3", "4", false)
	if n := AcceptedBy(path, "worker"); n != 2 {
		t.Fatalf("AcceptedBy(worker) = %d, want 2", n)
	}
	if n := AcceptedBy(path, "victim"); n != 1 {
		t.Fatalf("AcceptedBy(victim) = %d, want 1", n)
	}
	if n, ok := WaitAccepted(path, "worker", 2, time.Second); !ok || n != 2 {
		t.Fatalf("WaitAccepted(worker, 2) = %d, %v; want 2, true", n, ok)
	}
	if n, ok := WaitAccepted(path, "worker", 3, 50*time.Millisecond); ok || n != 2 {
		t.Fatalf("WaitAccepted(worker, 3) = %d, %v; want 2, false after the timeout", n, ok)
	}

	events, err := Finish(path, "parent", "c", "3")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 11 {
		t.Fatalf("Finish read %d events, want 11", len(events))
	}
	if last := events[len(events)-1]; last.Kind != Final || last.Proc != "parent" || last.Key != "c" || last.Value != "3" {
		t.Fatalf("last event %+v, want the final state", last)
	}
	v, ok := LastWrite(events, "victim")
	if !ok || v.Kind != Rejected || v.Base != "1" {
		t.Fatalf("LastWrite(victim) = %+v, %v; want its second, rejected write", v, ok)
	}
	if _, ok := LastWrite(events, "parent"); ok {
		t.Fatal("LastWrite found a write of a process that made none")
	}
	if err := Check(events, Options{Initial: "0", Counter: true}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Finish(filepath.Join(t.TempDir(), "no", "such", "dir"), "parent", "c", "3"); err == nil {
		t.Fatal("Finish into a missing directory succeeded")
	}
}
