// Package chaos runs randomized fault schedules against fencedlock and
// checks the histories they produce, the way Jepsen does: real worker
// processes contend for one lock and increment a register through the
// backend's fencing guard, a seeded nemesis injects faults (paused
// processes, network faults, server crashes, an operator deleting the lock
// key), and the recorded history is checked for
//
//	(a) linearizability of the register (porcupine), with fenced writes
//	    that the register rejects when stale and writes of unknown
//	    outcome that may or may not have happened;
//	(b) mutual exclusion among leases their holders considered valid at
//	    the same moment, each until its last known deadline (renewals
//	    extend it), reported separately, per fault kind; an operator's
//	    deletion of the key excuses only the breaks it explains;
//	(c) fences strictly increasing across grants;
//	(d) no stale write accepted;
//	(e) the final register equals the number of applied increments.
//
// The same workers run a semaphore's permits (each slot with its own
// register; the history is checked per slot with [SplitSlots], and over all
// slots with [CheckLimit]: never more valid permits than the limit) and an
// election's terms (WorkerConfig.Mode).
//
// It is its own module so that porcupine never enters the library's
// dependency graph. Run it with `make chaos` (100 seeds per backend) or, for
// the short schedule CI runs, with
//
//	cd chaos && go test -race ./...
//
// See docs/chaos.md for the model, the clock argument and the figures.
package chaos
