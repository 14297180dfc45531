package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// regInput is the input of a register operation in the porcupine model.
type regInput struct {
	Op     Op
	Value  int64 // written
	Fence  uint64
	Holder string
}

// regOutput is the output of a register operation.
type regOutput struct {
	Phase Phase // OK, Stale or Info for claims and writes; OK for reads
	Value int64 // read
}

// regState is the register: its value and its guard's fence record.
type regState struct {
	Value  int64
	Fence  uint64
	Holder string
}

// accepts is the fencing rule (fencing.Check): a fence greater than the
// record, or equal to it from the same holder.
func (s regState) accepts(fence uint64, holder string) bool {
	return fence > s.Fence || (fence == s.Fence && holder == s.Holder)
}

// RegisterModel is the sequential specification of a fenced register.
// A read returns the value. A claim or write whose fence the rule accepts
// records the fence (and, for a write, the value); one it rejects changes
// nothing. An ok outcome requires acceptance; a stale one requires
// rejection. An unknown outcome (Info) is modelled as Jepsen does: the
// operation's return is the end of the history, so it may take effect at
// any point after its invocation, or (linearized last) not at all; where it
// takes effect the rule decides, so the step is always legal.
var RegisterModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		switch in.Op {
		case OpRead, OpFinal:
			return out.Value == s.Value, s
		case OpClaim, OpWrite:
			ok := s.accepts(in.Fence, in.Holder)
			next := s
			if ok {
				next.Fence, next.Holder = in.Fence, in.Holder
				if in.Op == OpWrite {
					next.Value = in.Value
				}
			}
			switch out.Phase {
			case OK:
				return ok, next
			case Stale:
				return !ok, s
			default:
				return true, next
			}
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.Op {
		case OpRead, OpFinal:
			return fmt.Sprintf("%s -> %d", in.Op, out.Value)
		case OpClaim:
			return fmt.Sprintf("claim(f%d %.6s) -> %s", in.Fence, in.Holder, out.Phase)
		}
		return fmt.Sprintf("write(%d, f%d %.6s) -> %s", in.Value, in.Fence, in.Holder, out.Phase)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("value %d, fence %d (%.6s)", s.Value, s.Fence, s.Holder)
	},
}

// Overlap is a break of mutual exclusion: two leases their holders both
// considered valid during [From, To].
type Overlap struct {
	A, B     Lease
	From, To int64
	Kinds    []FaultKind // the faults active at the time (or within 2 TTLs before)
	// Deletion is the del-lock fault that explains the break, if one
	// does (see [explains]); nil otherwise.
	Deletion *FaultRecord
}

// explains reports whether the del-lock fault d explains a break between
// leases x and y: d deleted the key of one of them (by holder id, read
// in the deletion's step), the other was granted after the deletion began,
// and the break was over within a TTL of the deletion's end. A correct
// backend refuses the deleted lease's renewals once its key is gone, so
// the lease can outlive the deletion by one renewal sent before it at
// most: sent + TTL - safety margin < d.End + TTL. Anything else near a
// deletion (a break between two later grants, or the deleted lease
// renewed on past that bound) is not what an operator's deletion does.
func explains(d FaultRecord, x, y Lease, to int64, ttl time.Duration) bool {
	if d.Kind != FaultDelLock || d.Deleted == "" || to > d.End+int64(ttl) {
		return false
	}
	return x.Holder == d.Deleted && y.Start > d.Begin || y.Holder == d.Deleted && x.Start > d.Begin
}

// Lease is the interval during which a holder considered its lease valid:
// from the grant's return to the earliest of its release's invocation, the
// moment it noticed the loss, and its last known local deadline.
type Lease struct {
	Worker     int
	Fence      uint64
	Holder     string
	Start, End int64
	Read       bool // a read lease (rw workload): it may overlap other read leases
}

// FenceErr is a violation of (c), with the faults active between the two
// grants (or within 2 TTLs before): a Redis failover may duplicate or
// lower a fence, which is counted, not hidden.
type FenceErr struct {
	Msg   string
	Kinds []FaultKind
}

// Report is the outcome of [Check].
type Report struct {
	Ops          int // operations given to the linearizability checker
	Linearizable porcupine.CheckResult
	Visual       string // the HTML visualisation of a non-linearizable history
	Overlaps     []Overlap
	FenceErrs    []FenceErr  // (c)
	StaleErrs    []string    // (d)
	FinalErr     string      // (e)
	OverLimit    []OverLimit // a semaphore's limit broken ([CheckLimit]); nil for a lock
	Accepted     int         // writes acknowledged
	Unknown      int         // writes of unknown outcome
	FinalValue   int64
	CheckTime    time.Duration
}

// Violations returns how many violations of (a)-(e) the report holds.
func (r Report) Violations() (a, b, c, d, e int) {
	if r.Linearizable != porcupine.Ok {
		a = 1
	}
	if r.FinalErr != "" {
		e = 1
	}
	return a, len(r.Overlaps), len(r.FenceErrs), len(r.StaleErrs), e
}

// CheckOptions tune [Check].
type CheckOptions struct {
	TTL     time.Duration
	Timeout time.Duration // for porcupine; 0 means none
	// VisualPath, if set, is where the HTML visualisation of a
	// non-linearizable history is written.
	VisualPath string
}

// Check checks a history for (a)-(e) (see the package documentation).
func Check(h History, opts CheckOptions) Report {
	start := time.Now()
	var r Report
	checkLinearizable(h, opts, &r)
	checkExclusion(h, opts, &r)
	checkFences(h, opts, &r)
	checkStale(h, &r)
	checkFinal(h, &r)
	r.CheckTime = time.Since(start)
	return r
}

// checkLinearizable checks (a), the linearizability of the register, and
// counts the acknowledged and unknown writes.
func checkLinearizable(h History, opts CheckOptions, r *Report) {
	end := h.End
	if h.Final != nil && h.Final.Return >= end {
		end = h.Final.Return + 1
	}
	ret := func(o Operation) int64 {
		if o.Phase == Info {
			return end
		}
		return o.Return
	}
	var ops []porcupine.Operation
	for _, o := range h.Ops {
		switch {
		case o.Op == OpRead && o.Phase == OK,
			(o.Op == OpClaim || o.Op == OpWrite) && (o.Phase == OK || o.Phase == Stale || o.Phase == Info):
			ops = append(ops, porcupine.Operation{ClientId: o.Worker,
				Input:  regInput{Op: o.Op, Value: o.Value, Fence: o.Fence, Holder: o.Holder},
				Output: regOutput{Phase: o.Phase, Value: o.Value}, Call: o.Call, Return: ret(o)})
		}
		if o.Op == OpWrite {
			switch o.Phase {
			case OK:
				r.Accepted++
			case Info:
				r.Unknown++
			}
		}
	}
	if h.Final != nil {
		r.FinalValue = h.Final.Value
		ops = append(ops, porcupine.Operation{ClientId: h.Final.Worker, Input: regInput{Op: OpFinal},
			Output: regOutput{Phase: OK, Value: h.Final.Value}, Call: h.Final.Call, Return: h.Final.Return})
	}
	r.Ops = len(ops)
	res, info := porcupine.CheckOperationsVerbose(RegisterModel, ops, opts.Timeout)
	r.Linearizable = res
	if res == porcupine.Illegal && opts.VisualPath != "" {
		info.AddAnnotations(annotations(h, end))
		if err := porcupine.VisualizePath(RegisterModel, info, opts.VisualPath); err == nil {
			r.Visual = opts.VisualPath
		} else {
			r.Visual = "(visualisation failed: " + err.Error() + ")"
		}
	}
}

// checkExclusion checks (b), mutual exclusion among leases considered
// valid (two read leases of the rw workload excepted).
func checkExclusion(h History, opts CheckOptions, r *Report) {
	leases := Leases(h)
	for i := range leases {
		for j := i + 1; j < len(leases); j++ {
			a, b := leases[i], leases[j]
			if a.Holder == b.Holder || a.Start >= b.End || b.Start >= a.End || (a.Read && b.Read) {
				continue
			}
			ov := Overlap{A: a, B: b, From: max(a.Start, b.Start), To: min(a.End, b.End)}
			ov.Kinds = activeKinds(h.Faults, ov.From, ov.To, opts.TTL)
			for k := range h.Faults {
				if explains(h.Faults[k], a, b, ov.To, opts.TTL) {
					ov.Deletion = &h.Faults[k]
					break
				}
			}
			r.Overlaps = append(r.Overlaps, ov)
		}
	}
}

// checkFences checks (c), fences strictly increasing across grants.
func checkFences(h History, opts CheckOptions, r *Report) {
	var grants []Operation
	for _, o := range h.Ops {
		if o.Op == OpAcquire && o.Phase == OK {
			grants = append(grants, o)
		}
	}
	seen := make(map[uint64]Operation)
	for _, g := range grants {
		if p, dup := seen[g.Fence]; dup {
			r.FenceErrs = append(r.FenceErrs, FenceErr{
				Msg:   fmt.Sprintf("fence %d granted twice: worker %d at %d and worker %d at %d", g.Fence, p.Worker, p.Return, g.Worker, g.Return),
				Kinds: activeKinds(h.Faults, min(p.Call, g.Call), max(p.Return, g.Return), opts.TTL)})
		}
		seen[g.Fence] = g
	}
	for _, g1 := range grants {
		for _, g2 := range grants {
			if g1.Return < g2.Call && g1.Fence > g2.Fence {
				r.FenceErrs = append(r.FenceErrs, FenceErr{
					Msg:   fmt.Sprintf("fence %d (worker %d) granted after fence %d (worker %d) had been granted", g2.Fence, g2.Worker, g1.Fence, g1.Worker),
					Kinds: activeKinds(h.Faults, g1.Call, g2.Return, opts.TTL)})
			}
		}
	}
}

// checkStale checks (d), no stale write accepted: an acknowledged claim or
// write whose fence the rule rejects against one acknowledged before it
// was sent.
func checkStale(h History, r *Report) {
	var acked []Operation
	for _, o := range h.Ops {
		if (o.Op == OpClaim || o.Op == OpWrite) && o.Phase == OK {
			acked = append(acked, o)
		}
	}
	for _, w := range acked {
		for _, p := range acked {
			if p.Return < w.Call && !(regState{Fence: p.Fence, Holder: p.Holder}).accepts(w.Fence, w.Holder) {
				r.StaleErrs = append(r.StaleErrs, fmt.Sprintf("%s of worker %d with fence %d accepted after %s with fence %d (worker %d) was acknowledged", w.Op, w.Worker, w.Fence, p.Op, p.Fence, p.Worker))
				break
			}
		}
	}
}

// checkFinal checks (e), the final register equals the applied
// increments: every acknowledged write, and some of the unknown ones
// (counted by checkLinearizable).
func checkFinal(h History, r *Report) {
	switch {
	case h.Final == nil:
		r.FinalErr = "no final read"
	case r.FinalValue < int64(r.Accepted) || r.FinalValue > int64(r.Accepted+r.Unknown):
		r.FinalErr = fmt.Sprintf("final register %d, but %d writes were acknowledged and %d had unknown outcomes", r.FinalValue, r.Accepted, r.Unknown)
	}
}

// Leases returns the validity interval of every grant in h: from the
// grant's return until the earliest of its release's invocation and the
// moment its holder saw it lost, but no later than its last known local
// deadline, the latest of the grant's, its renewals' (OpRenew) and the ones
// sampled at its release and loss. A lease's deadline only moves later
// (each renewal extends it) and every sample was read while the lease was
// valid, so the lease was valid at least until the latest one: a missed or
// late sample only shortens the interval, so there are no false breaks.
// Leases are told apart by worker and holder id (unique per acquisition:
// a Redis failover may grant one fence twice).
func Leases(h History) []Lease {
	type key struct {
		w int
		h string
	}
	cut := make(map[key]int64)      // the earliest release or loss
	deadline := make(map[key]int64) // the latest known deadline
	lower := func(k key, t int64) {
		if e, ok := cut[k]; !ok || t < e {
			cut[k] = t
		}
	}
	raise := func(k key, t int64) {
		if t > deadline[k] {
			deadline[k] = t
		}
	}
	for _, o := range h.Ops {
		k := key{o.Worker, o.Holder}
		switch {
		case o.Op == OpAcquire && o.Phase == OK:
			raise(k, o.Deadline)
		case o.Op == OpRelease:
			lower(k, o.Call)
			raise(k, o.Deadline)
		}
	}
	for _, e := range h.Renewals {
		raise(key{e.Worker, e.Holder}, e.Deadline)
	}
	for _, e := range h.Lost {
		k := key{e.Worker, e.Holder}
		lower(k, e.T)
		raise(k, e.Deadline)
	}
	var out []Lease
	for _, o := range h.Ops {
		if o.Op != OpAcquire || o.Phase != OK {
			continue
		}
		k := key{o.Worker, o.Holder}
		l := Lease{Worker: o.Worker, Fence: o.Fence, Holder: o.Holder, Start: o.Return, End: deadline[k], Read: o.Read}
		if c, ok := cut[k]; ok && c < l.End {
			l.End = c
		}
		if l.End > l.Start {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// activeKinds returns the kinds of the faults that overlap [from, to] or
// ended at most 2 TTLs before it, or "none".
func activeKinds(faults []FaultRecord, from, to int64, ttl time.Duration) []FaultKind {
	var kinds []FaultKind
	for _, f := range faults {
		if f.Begin <= to && f.End+int64(2*ttl) >= from && !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	if len(kinds) == 0 {
		kinds = []FaultKind{"none"}
	}
	return kinds
}

func annotations(h History, end int64) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range h.Faults {
		e := f.End
		if e <= f.Begin {
			e = f.Begin + 1
		}
		out = append(out, porcupine.Annotation{Tag: "nemesis", Start: f.Begin, End: min(e, end),
			Description: string(f.Kind), Details: fmt.Sprintf("target %d %s", f.Target, f.Note)})
	}
	for _, l := range h.Lost {
		out = append(out, porcupine.Annotation{ClientId: l.Worker, Tag: "lease lost", Start: l.T, End: l.T,
			Description: "lease lost", Details: l.Err})
	}
	return out
}

// Unexcused returns how many (b) breaks and (c) violations of r no fault
// of the allowed kinds excuses. Only two kinds excuse anything:
// FaultDelLock, a break it explains (Overlap.Deletion); FaultFailover (a
// Redis failover loses the master's latest writes), any break or (c)
// violation during a failover or in the 2 TTLs after it.
func (r Report) Unexcused(allowed ...FaultKind) (breaks, fenceErrs int) {
	failover := slices.Contains(allowed, FaultFailover)
	for _, o := range r.Overlaps {
		switch {
		case o.Deletion != nil && slices.Contains(allowed, FaultDelLock):
		case failover && slices.Contains(o.Kinds, FaultFailover):
		default:
			breaks++
		}
	}
	for _, f := range r.FenceErrs {
		if !failover || !slices.Contains(f.Kinds, FaultFailover) {
			fenceErrs++
		}
	}
	return breaks, fenceErrs
}

// Summary describes the violations of r in a few lines.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "(a) linearizable: %s over %d ops", r.Linearizable, r.Ops)
	if r.Visual != "" {
		fmt.Fprintf(&b, " (visualisation: %s)", r.Visual)
	}
	fmt.Fprintf(&b, "\n(b) %d mutual-exclusion breaks", len(r.Overlaps))
	for i, o := range r.Overlaps {
		if i == 5 {
			fmt.Fprintf(&b, "\n    ... %d more", len(r.Overlaps)-i)
			break
		}
		fmt.Fprintf(&b, "\n    workers %d (fence %d) and %d (fence %d) both valid for %v, faults %v", o.A.Worker, o.A.Fence, o.B.Worker, o.B.Fence, time.Duration(o.To-o.From), o.Kinds)
		if o.Deletion != nil {
			fmt.Fprintf(&b, ", explained by the del-lock of %.6s", o.Deletion.Deleted)
		}
	}
	for i, o := range r.OverLimit {
		if i == 5 {
			fmt.Fprintf(&b, "\n    ... %d more", len(r.OverLimit)-i)
			break
		}
		fmt.Fprintf(&b, "\n    limit broken: %d valid permits (slots %v) for %v, faults %v", o.N, o.Slots, time.Duration(o.To-o.From), o.Kinds)
	}
	fmt.Fprintf(&b, "\n(c) %d fence-order violations", len(r.FenceErrs))
	for i, e := range r.FenceErrs {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "\n    %s, faults %v", e.Msg, e.Kinds)
	}
	fmt.Fprintf(&b, "\n(d) %d stale writes accepted", len(r.StaleErrs))
	for i, s := range r.StaleErrs {
		if i == 5 {
			break
		}
		b.WriteString("\n    " + s)
	}
	fmt.Fprintf(&b, "\n(e) final register %d, %d acknowledged writes, %d unknown", r.FinalValue, r.Accepted, r.Unknown)
	if r.FinalErr != "" {
		b.WriteString(": " + r.FinalErr)
	}
	return b.String()
}
