package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// OverLimit is a break of a semaphore's limit: more than the limit of
// permits their holders all considered valid during [From, To].
type OverLimit struct {
	N        int   // valid permits at once
	Slots    []int // their slots
	From, To int64
	Kinds    []FaultKind // the faults active at the time (or within 2 TTLs before)
}

// SplitSlots splits a semaphore workload's history by slot: each part is
// the history of one slot's lock and register (its grants, renewals,
// losses, claims, reads and writes), with every fault, so [Check] checks
// it as a lock's: (b) at most one valid permit per slot, (c) per-slot
// fences strictly increasing, (d) no stale write accepted by the slot's
// guard, (a) and (e) the slot's register. Final is left for the caller.
func SplitSlots(h History) map[int]History {
	parts := make(map[int]History)
	part := func(slot int) History {
		p, ok := parts[slot]
		if !ok {
			p = History{Faults: h.Faults, End: h.End}
		}
		return p
	}
	for _, o := range h.Ops {
		p := part(o.Slot)
		p.Ops = append(p.Ops, o)
		parts[o.Slot] = p
	}
	for _, e := range h.Lost {
		p := part(e.Slot)
		p.Lost = append(p.Lost, e)
		parts[e.Slot] = p
	}
	for _, e := range h.Renewals {
		p := part(e.Slot)
		p.Renewals = append(p.Renewals, e)
		parts[e.Slot] = p
	}
	return parts
}

// CheckLimit returns every interval in which more than limit permits of h
// were valid at once, by the validity intervals of [Leases] (whatever
// their slots): the semaphore's own guarantee, which the per-slot checks
// of [SplitSlots] imply only if no slot is at or above the limit.
func CheckLimit(h History, limit int, ttl time.Duration) []OverLimit {
	leases := Leases(h)
	slot := make(map[string]int) // holder id -> slot
	for _, o := range h.Ops {
		if o.Op == OpAcquire && o.Phase == OK {
			slot[o.Holder] = o.Slot
		}
	}
	type edge struct {
		t     int64
		delta int
		l     Lease
	}
	var edges []edge
	for _, l := range leases {
		edges = append(edges, edge{l.Start, +1, l}, edge{l.End, -1, l})
	}
	// Intervals are half-open: at one instant an end comes before a start.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta
	})
	var out []OverLimit
	valid := make(map[string]Lease)
	for i, e := range edges {
		if e.delta > 0 {
			valid[e.l.Holder] = e.l
		} else {
			delete(valid, e.l.Holder)
		}
		if len(valid) <= limit || i+1 == len(edges) || edges[i+1].t == e.t {
			continue
		}
		ol := OverLimit{N: len(valid), From: e.t, To: edges[i+1].t}
		for h := range valid {
			ol.Slots = append(ol.Slots, slot[h])
		}
		sort.Ints(ol.Slots)
		ol.Kinds = activeKinds(h.Faults, ol.From, ol.To, ttl)
		out = append(out, ol)
	}
	return out
}

// MergeReports sums the reports of a semaphore's slots into one: a slot's
// violation is the semaphore's (the worst of (a), every (b)-(d), the final
// errors of every slot; the counts added).
func MergeReports(rs ...Report) Report {
	var m Report
	m.Linearizable = porcupine.Ok
	var finals []string
	for i, r := range rs {
		m.Ops += r.Ops
		switch {
		case r.Linearizable == porcupine.Illegal:
			m.Linearizable = porcupine.Illegal
		case r.Linearizable == porcupine.Unknown && m.Linearizable == porcupine.Ok:
			m.Linearizable = porcupine.Unknown
		}
		if m.Visual == "" {
			m.Visual = r.Visual
		}
		m.Overlaps = append(m.Overlaps, r.Overlaps...)
		m.FenceErrs = append(m.FenceErrs, r.FenceErrs...)
		m.StaleErrs = append(m.StaleErrs, r.StaleErrs...)
		m.OverLimit = append(m.OverLimit, r.OverLimit...)
		if r.FinalErr != "" {
			finals = append(finals, fmt.Sprintf("part %d: %s", i, r.FinalErr))
		}
		m.Accepted += r.Accepted
		m.Unknown += r.Unknown
		m.FinalValue += r.FinalValue
		m.CheckTime += r.CheckTime
	}
	m.FinalErr = strings.Join(finals, "; ")
	return m
}
