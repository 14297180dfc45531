package chaos

// Op names the operation an [Event] belongs to.
type Op string

// Operations of a worker. Claim, Read and Write act on the register;
// Acquire, Release and Lost on the lock.
const (
	OpAcquire Op = "acquire" // Locker.Acquire (Semaphore.Acquire, Election.Campaign): Fence, Slot, Holder, Deadline on ok
	OpClaim   Op = "claim"   // a fenced write of the fence record only: Fence, Holder
	OpRead    Op = "read"    // a read of the register: Value on ok
	OpWrite   Op = "write"   // a fenced write of Value: Fence, Holder
	OpRelease Op = "release" // Lease.Release: Deadline (the last one seen) on invoke
	OpLost    Op = "lost"    // the lease's context ended with ErrLeaseLost: Err, Deadline
	OpRenew   Op = "renew"   // the lease's local deadline moved later (a renewal): Deadline, the new one
	OpFinal   Op = "final"   // the parent's read of the register after every worker stopped
)

// Phase says where in an operation an [Event] was taken (Jepsen's types).
type Phase string

// Phases of an operation. Every invoke of a worker is followed by exactly
// one of ok, fail, stale or info from the same worker before its next
// invoke; Lost and Renew are lone events (info and ok), sent by the
// goroutine that watches the lease.
const (
	Invoke Phase = "invoke" // taken before the request was sent
	OK     Phase = "ok"     // the operation happened
	Fail   Phase = "fail"   // the operation certainly did not happen (no effect)
	Stale  Phase = "stale"  // the guard rejected the write: no effect, and the guard saw a newer fence
	Info   Phase = "info"   // unknown outcome: it may or may not have happened, now or later
)

// Event is one line a worker sends to the parent. T is read with [Now]
// before the request is sent (invoke) or after its reply arrived (every
// other phase), so the real-time interval [invoke.T, completion.T] contains
// the moment the operation took effect, if it did.
type Event struct {
	Worker   int    `json:"w"`
	Op       Op     `json:"op"`
	Phase    Phase  `json:"ph"`
	T        int64  `json:"t"`                  // CLOCK_MONOTONIC, ns
	Fence    uint64 `json:"fence,omitempty"`    // the lease's fence
	Slot     int    `json:"slot,omitempty"`     // the permit's slot (semaphore workload; 0 otherwise)
	Holder   string `json:"holder,omitempty"`   // the lease's holder id (never the owner token)
	Value    int64  `json:"value,omitempty"`    // read or written
	Deadline int64  `json:"deadline,omitempty"` // the lease's local deadline, CLOCK_MONOTONIC ns
	Err      string `json:"err,omitempty"`
	Read     bool   `json:"read,omitempty"` // acquire: a read (shared) lease of the rw workload
}
