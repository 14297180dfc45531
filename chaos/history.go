package chaos

import (
	"fmt"
	"maps"
	"slices"
)

// Operation is an invocation paired with its completion.
type Operation struct {
	Worker int
	Op     Op
	Call   int64 // the invoke event's T
	Return int64 // the completion's T; for Phase Info, the end of the history
	Phase  Phase // the completion's phase; Info if none arrived
	Fence  uint64
	Slot   int // the permit's slot (the semaphore workload), whose register the op acts on
	Holder string
	Value  int64 // written (write) or read (read, final)
	Err    string
	Read   bool // acquire: a read (shared) lease of the rw workload
	// Deadline is the lease's local deadline: for an acquire, the one at
	// the grant; for a release, the last one seen before it.
	Deadline int64
}

// History is what a run produced: the workers' operations (in the order
// each worker sent them), their lease-lost notices and renewals, the
// faults and the final read.
type History struct {
	Ops      []Operation
	Lost     []Event
	Renewals []Event // OpRenew: a lease's local deadline moved later
	Faults   []FaultRecord
	Final    *Operation // the parent's read once every worker had stopped; nil if it failed
	End      int64      // a time after every event
}

// BuildHistory pairs each worker's invoke events with their completions.
// An invocation with no completion (its worker stopped or died) has an
// unknown outcome. It returns an error for an event stream that breaks the
// protocol (a completion without an invocation).
func BuildHistory(events []Event) (History, error) {
	var h History
	pending := make(map[int]*Event)
	for i := range events {
		e := events[i]
		if e.T > h.End {
			h.End = e.T
		}
		switch e.Op {
		case OpLost:
			h.Lost = append(h.Lost, e)
			continue
		case OpRenew:
			h.Renewals = append(h.Renewals, e)
			continue
		}
		if e.Phase == Invoke {
			if p := pending[e.Worker]; p != nil {
				return h, fmt.Errorf("chaos: worker %d invoked %s while %s was pending", e.Worker, e.Op, p.Op)
			}
			pending[e.Worker] = &events[i]
			continue
		}
		p := pending[e.Worker]
		if p == nil || p.Op != e.Op {
			return h, fmt.Errorf("chaos: worker %d: %s %s without its invocation", e.Worker, e.Op, e.Phase)
		}
		delete(pending, e.Worker)
		op := Operation{Worker: e.Worker, Op: e.Op, Call: p.T, Return: e.T, Phase: e.Phase,
			Fence: p.Fence, Slot: p.Slot, Holder: p.Holder, Value: p.Value, Err: e.Err, Deadline: p.Deadline}
		switch e.Op {
		case OpAcquire:
			op.Fence, op.Slot, op.Holder, op.Deadline, op.Read = e.Fence, e.Slot, e.Holder, e.Deadline, e.Read
		case OpRead:
			op.Value = e.Value
		}
		h.Ops = append(h.Ops, op)
	}
	for _, w := range slices.Sorted(maps.Keys(pending)) {
		p := pending[w]
		h.Ops = append(h.Ops, Operation{Worker: w, Op: p.Op, Call: p.T, Phase: Info,
			Fence: p.Fence, Slot: p.Slot, Holder: p.Holder, Value: p.Value, Err: "no completion", Deadline: p.Deadline})
	}
	h.End++
	for i := range h.Ops {
		if h.Ops[i].Phase == Info {
			h.Ops[i].Return = 0 // set by the checker to the end of the history
		}
	}
	return h, nil
}
