// Package history records what lock holders did to a guarded resource, from
// many processes, and checks the record against the fencing guarantees:
//
//   - no stale write was accepted: every accepted write's fence is at least
//     the greatest fence accepted before it, and equal to it only from the
//     same holder (so fences of accepted writes never go back);
//   - a read-modify-write was accepted only if it was computed from the
//     state it replaced (no lost update);
//   - the final state equals the result of the accepted writes in order
//     (and, for a counter, the initial value plus the accepted increments).
//
// Processes append one JSON object per line to a shared file opened with
// O_APPEND, so each event is one write(2) and lines from different
// processes never interleave. The order of the file is the order of the
// history. A worker must record a write's outcome before it releases its
// lock: then the file orders the writes made under valid leases as the
// server applied them, and only a write delayed past its lease (the case
// fencing exists for) can appear out of place, which the checker reports.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// Kind says what an Event records.
type Kind string

// The kinds of events.
const (
	Acquire  Kind = "acquire"  // a lease was granted: Key, Fence, Holder
	Read     Kind = "read"     // the resource was read: Value
	Attempt  Kind = "attempt"  // a write is about to be sent: Value (and Base for a read-modify-write)
	Accepted Kind = "accepted" // the resource applied the write: as Attempt
	Rejected Kind = "rejected" // the resource refused the write; nothing changed: as Attempt, with Err
	Final    Kind = "final"    // the resource's state at the end: Key, Value
)

// Event is one line of a history.
type Event struct {
	Time   time.Time     `json:"time"`             // when it was recorded (diagnostics only; order is file order)
	Proc   string        `json:"proc"`             // the recording process or worker
	Kind   Kind          `json:"kind"`             // what happened
	Key    string        `json:"key"`              // the resource (or lock) name
	Fence  fencing.Token `json:"fence,omitzero"`   // the lease's fence
	Holder string        `json:"holder,omitempty"` // the lease's holder id (never the owner token)
	Value  string        `json:"value,omitempty"`  // the value read, written or found at the end
	RMW    bool          `json:"rmw,omitempty"`    // the write was computed from Base
	Base   string        `json:"base,omitempty"`   // the value a read-modify-write read
	Err    string        `json:"err,omitempty"`    // why a write was rejected
}

// Recorder appends events to a history file. It is safe for concurrent use;
// several processes may append to the same file, each with its own
// Recorder.
type Recorder struct {
	proc string
	mu   sync.Mutex
	f    *os.File
}

// Open opens (creating it if needed) the history file at path for
// appending, recording events as process proc.
func Open(path, proc string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Recorder{proc: proc, f: f}, nil
}

// Record appends e as one line, in one write, filling in Time and Proc.
func (r *Recorder) Record(e Event) error {
	e.Time = time.Now()
	e.Proc = r.proc
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	line = append(line, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return errors.New("history: recorder closed")
	}
	if _, err := r.f.Write(line); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// Close closes the file. It is idempotent.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// ReadFile reads a history file written by Recorders.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	var events []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("history: %s line %d: %w", path, n, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("history: %s: %w", path, err)
	}
	return events, nil
}

// Finish ends a history file at path: it appends, as process proc, the
// Final event saying key's state at the end is final, then reads the whole
// file back. Call it once every process has stopped writing to the file;
// the events it returns are ready for [Check] and [LastWrite].
func Finish(path, proc, key, final string) ([]Event, error) {
	rec, err := Open(path, proc)
	if err != nil {
		return nil, err
	}
	err = rec.Record(Event{Kind: Final, Key: key, Value: final})
	if cerr := rec.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("history: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	return ReadFile(path)
}

// LastWrite returns the outcome (an Accepted or Rejected event) of the last
// write that process proc recorded in events, and false if it recorded
// none.
func LastWrite(events []Event, proc string) (Event, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Proc == proc && (e.Kind == Accepted || e.Kind == Rejected) {
			return e, true
		}
	}
	return Event{}, false
}

// AcceptedBy counts the accepted writes of the processes whose name starts
// with prefix in the history file at path, which other processes may still
// be appending to. It returns 0 if the file cannot be read yet (not created,
// or a line read while it was being appended): a caller polls again.
func AcceptedBy(path, prefix string) int {
	events, err := ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range events {
		if e.Kind == Accepted && strings.HasPrefix(e.Proc, prefix) {
			n++
		}
	}
	return n
}

// WaitAccepted polls the history file at path, every 10ms for at most
// timeout, until the processes whose name starts with prefix have n
// accepted writes in it (see [AcceptedBy]). It returns the last count and
// whether it reached n.
func WaitAccepted(path, prefix string, n int, timeout time.Duration) (int, bool) {
	deadline := time.Now().Add(timeout)
	for {
		got := AcceptedBy(path, prefix)
		if got >= n {
			return got, true
		}
		if time.Now().After(deadline) {
			return got, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Options tune [Check].
type Options struct {
	// Initial is the state of every key before the history ("" if unset).
	Initial string
	// Counter says the resource is a counter that every accepted write
	// increments: the final state must be Initial plus the number of
	// accepted writes of the key.
	Counter bool
}

// Violation is one broken guarantee.
type Violation struct {
	Index int    // position of the offending event in the history
	Event Event  // the offending event
	Rule  string // which guarantee: see the Rule constants
	Msg   string // what was found
}

func (v Violation) String() string {
	if v.Event.Fence == 0 {
		return fmt.Sprintf("#%d %s (proc %s, key %q): %s", v.Index, v.Rule, v.Event.Proc, v.Event.Key, v.Msg)
	}
	return fmt.Sprintf("#%d %s (proc %s, key %q, fence %d): %s", v.Index, v.Rule, v.Event.Proc, v.Event.Key, v.Event.Fence, v.Msg)
}

// Rules checked by [Check].
const (
	RuleStale      = "stale write accepted"            // accepted fence older than one accepted before
	RuleDuplicate  = "equal fence from another holder" // accepted fence equal to the greatest, other holder
	RuleLostUpdate = "lost update"                     // accepted read-modify-write computed from a replaced state
	RuleFinal      = "final state"                     // final state differs from the accepted writes
	RuleCounter    = "counter"                         // final counter differs from initial + accepted increments
	RuleOutcome    = "outcome"                         // an outcome without its attempt, or an attempt without outcome
)

// Result summarises a history.
type Result struct {
	Attempted  int // write attempts
	Accepted   int // writes the resource applied
	Rejected   int // writes the resource refused
	Violations []Violation
}

// Err returns nil if the history has no violation, and otherwise an error
// listing them (the first 20).
func (r Result) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d violations (%d attempted, %d accepted, %d rejected):", len(r.Violations), r.Attempted, r.Accepted, r.Rejected)
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... %d more", len(r.Violations)-i)
			break
		}
		b.WriteString("\n  " + v.String())
	}
	return errors.New(b.String())
}

// Has reports whether r holds a violation of rule.
func (r Result) Has(rule string) bool {
	for _, v := range r.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

type keyState struct {
	value    string
	fence    fencing.Token
	holder   string
	accepted int
}

// Check replays events in order and reports every violated guarantee (see
// the package documentation). It never stops at the first violation.
func Check(events []Event, opts Options) Result {
	var res Result
	keys := make(map[string]*keyState)
	state := func(k string) *keyState {
		s := keys[k]
		if s == nil {
			s = &keyState{value: opts.Initial}
			keys[k] = s
		}
		return s
	}
	type pend struct {
		index int
		e     Event
	}
	pending := make(map[string]pend) // proc -> its attempt awaiting an outcome
	add := func(i int, e Event, rule, format string, args ...any) {
		res.Violations = append(res.Violations, Violation{Index: i, Event: e, Rule: rule, Msg: fmt.Sprintf(format, args...)})
	}
	for i, e := range events {
		switch e.Kind {
		case Attempt:
			res.Attempted++
			if p, ok := pending[e.Proc]; ok {
				add(p.index, p.e, RuleOutcome, "attempt without an outcome before the next attempt")
			}
			pending[e.Proc] = pend{i, e}
		case Accepted, Rejected:
			p, ok := pending[e.Proc]
			if !ok || p.e.Key != e.Key || p.e.Fence != e.Fence || p.e.Holder != e.Holder || p.e.Value != e.Value {
				add(i, e, RuleOutcome, "outcome without a matching attempt")
			}
			delete(pending, e.Proc)
			if e.Kind == Rejected {
				res.Rejected++
				continue
			}
			res.Accepted++
			s := state(e.Key)
			switch {
			case s.accepted > 0 && e.Fence < s.fence:
				add(i, e, RuleStale, "fence %d accepted after fence %d (holder %s): fences went back", e.Fence, s.fence, s.holder)
			case s.accepted > 0 && e.Fence == s.fence && e.Holder != s.holder:
				add(i, e, RuleDuplicate, "fence %d accepted from holder %s after holder %s", e.Fence, e.Holder, s.holder)
			}
			if e.RMW && e.Base != s.value {
				add(i, e, RuleLostUpdate, "computed from %q but the state was %q: an accepted write was overwritten", e.Base, s.value)
			}
			if s.accepted == 0 || e.Fence > s.fence {
				s.fence, s.holder = e.Fence, e.Holder
			}
			s.value = e.Value
			s.accepted++
		case Final:
			s := state(e.Key)
			if e.Value != s.value {
				add(i, e, RuleFinal, "final state %q, but the accepted writes leave %q", e.Value, s.value)
			}
			if opts.Counter {
				init, err1 := strconv.ParseInt(orZero(opts.Initial), 10, 64)
				final, err2 := strconv.ParseInt(orZero(e.Value), 10, 64)
				switch {
				case err1 != nil || err2 != nil:
					add(i, e, RuleCounter, "counter %q (initial %q) is not a number", e.Value, opts.Initial)
				case final != init+int64(s.accepted):
					add(i, e, RuleCounter, "counter is %d after %d accepted increments from %d: %d increments lost", final, s.accepted, init, init+int64(s.accepted)-final)
				}
			}
		}
	}
	left := make([]pend, 0, len(pending))
	for _, p := range pending {
		left = append(left, p)
	}
	sort.Slice(left, func(a, b int) bool { return left[a].index < left[b].index })
	for _, p := range left {
		add(p.index, p.e, RuleOutcome, "attempt without an outcome")
	}
	return res
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
