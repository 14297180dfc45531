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
}

// Lease is the interval during which a holder considered its lease valid:
// from the grant's return to the earliest of its release's invocation, the
// moment it noticed the loss, and its last known local deadline.
type Lease struct {
	Worker     int
	Fence      uint64
	Holder     string
	Start, End int64
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
	FenceErrs    []FenceErr // (c)
	StaleErrs    []string   // (d)
	FinalErr     string     // (e)
	Accepted     int        // writes acknowledged
	Unknown      int        // writes of unknown outcome
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

	// (a) linearizability of the register.
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

	// (b) mutual exclusion among leases considered valid.
	leases := Leases(h)
	for i := range leases {
		for j := i + 1; j < len(leases); j++ {
			a, b := leases[i], leases[j]
			if a.Holder == b.Holder || a.Start >= b.End || b.Start >= a.End {
				continue
			}
			ov := Overlap{A: a, B: b, From: max(a.Start, b.Start), To: min(a.End, b.End)}
			ov.Kinds = activeKinds(h.Faults, ov.From, ov.To, opts.TTL)
			r.Overlaps = append(r.Overlaps, ov)
		}
	}

	// (c) fences strictly increasing across grants.
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

	// (d) no stale write accepted: an acknowledged claim or write whose
	// fence the rule rejects against one acknowledged before it was sent.
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

	// (e) the final register equals the applied increments: every
	// acknowledged write, and some of the unknown ones.
	switch {
	case h.Final == nil:
		r.FinalErr = "no final read"
	case r.FinalValue < int64(r.Accepted) || r.FinalValue > int64(r.Accepted+r.Unknown):
		r.FinalErr = fmt.Sprintf("final register %d, but %d writes were acknowledged and %d had unknown outcomes", r.FinalValue, r.Accepted, r.Unknown)
	}
	r.CheckTime = time.Since(start)
	return r
}

// Leases returns the validity interval of every grant in h.
func Leases(h History) []Lease {
	type key struct {
		w int
		f uint64
	}
	ends := make(map[key]int64)
	lower := func(k key, t int64) {
		if t == 0 {
			return
		}
		if e, ok := ends[k]; !ok || t < e {
			ends[k] = t
		}
	}
	for _, o := range h.Ops {
		if o.Op == OpRelease {
			k := key{o.Worker, o.Fence}
			lower(k, o.Call)
			lower(k, o.Deadline)
		}
	}
	for _, e := range h.Lost {
		k := key{e.Worker, e.Fence}
		lower(k, e.T)
		lower(k, e.Deadline)
	}
	var out []Lease
	for _, o := range h.Ops {
		if o.Op != OpAcquire || o.Phase != OK {
			continue
		}
		l := Lease{Worker: o.Worker, Fence: o.Fence, Holder: o.Holder, Start: o.Return, End: o.Deadline}
		if e, ok := ends[key{o.Worker, o.Fence}]; ok && e < l.End {
			l.End = e
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
