package chaos

import (
	"math/rand/v2"
	"time"
)

// FaultKind names a kind of fault the nemesis injects.
type FaultKind string

// Kinds of faults.
const (
	// FaultPauseWorker stops a random worker with SIGSTOP for 0.5-3 TTLs.
	FaultPauseWorker FaultKind = "pause-worker"
	// FaultPauseHolder stops the worker holding the lock, preferably
	// between its read and its write, for 0.5-3 TTLs.
	FaultPauseHolder FaultKind = "pause-holder"
	// FaultBlackhole holds every byte between one worker and its servers
	// for 0.5-2 TTLs (faultproxy.Blackhole).
	FaultBlackhole FaultKind = "blackhole"
	// FaultLatency delays one worker's traffic by 5-50% of a TTL, each way,
	// for 0.5-2 TTLs.
	FaultLatency FaultKind = "latency"
	// FaultReset resets one worker's connections and refuses new ones for
	// 0.2-1 TTL.
	FaultReset FaultKind = "reset"
	// FaultKillRestart kills redis-server with SIGKILL and restarts it
	// after 0.2-1.5 TTLs, with its append-only file (appendfsync always).
	FaultKillRestart FaultKind = "kill-restart"
	// FaultKillRestartVolatile kills redis-server and restarts it without
	// persistence: every key, fence counters included, is gone.
	FaultKillRestartVolatile FaultKind = "kill-restart-volatile"
	// FaultDelLock deletes the lock key (on etcd, the lock's queue), as an
	// operator would.
	FaultDelLock FaultKind = "del-lock"
	// FaultMemberKill stops a random etcd member and restarts it after
	// 0.5-2 TTLs.
	FaultMemberKill FaultKind = "member-kill"
	// FaultPartition cuts a random etcd member off from its peers for
	// 0.5-2 TTLs (clients still reach it).
	FaultPartition FaultKind = "partition"
	// FaultLeaderChange moves etcd's leadership to another member.
	FaultLeaderChange FaultKind = "leader-change"
	// FaultFailover kills the Redis master (SIGKILL) whose replica lags
	// behind a fault proxy; the sentinels promote the replica, and a fresh
	// replica of the new master is started (as an operator would).
	FaultFailover FaultKind = "failover"
)

// Fault is one planned fault: when it starts (from the beginning of the
// run), how long it lasts, and its parameters.
type Fault struct {
	Kind     FaultKind
	Start    time.Duration
	Duration time.Duration
	Worker   int           // the target of per-worker faults (pause-holder picks its own)
	Member   int           // the target of etcd member faults (0-2)
	Latency  time.Duration // for FaultLatency
}

// FaultRecord is a fault as the nemesis applied it, in CLOCK_MONOTONIC ns.
type FaultRecord struct {
	Fault
	Begin, End int64
	Target     int    // the worker it hit, or -1 for the server
	Note       string // what happened (e.g. "deleted" or "no key")
	// Deleted is, for FaultDelLock, the holder id of the lease whose key
	// the deletion removed ("" if the key was free or the deletion failed).
	Deleted string
}

// Schedule plans the faults of one run from seed: faults of the given
// kinds, one after another, separated by 0.2-1 TTL, from TTL/2 until
// length. The same seed and arguments give the same schedule.
func Schedule(seed uint64, kinds []FaultKind, workers int, ttl, length time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6368616f73)) // "chaos"
	between := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(ttl))
	}
	var out []Fault
	for at := ttl / 2; len(kinds) > 0; {
		f := Fault{Kind: kinds[rng.IntN(len(kinds))], Start: at, Worker: rng.IntN(workers), Member: rng.IntN(3)}
		switch f.Kind {
		case FaultPauseWorker, FaultPauseHolder:
			f.Duration = between(0.5, 3)
		case FaultBlackhole:
			f.Duration = between(0.5, 2)
		case FaultLatency:
			f.Duration = between(0.5, 2)
			f.Latency = between(0.05, 0.5)
		case FaultReset:
			f.Duration = between(0.2, 1)
		case FaultKillRestart, FaultKillRestartVolatile:
			f.Duration = between(0.2, 1.5)
		case FaultMemberKill, FaultPartition, FaultFailover:
			f.Duration = between(0.5, 2)
		case FaultDelLock:
		}
		if f.Start+f.Duration > length {
			break
		}
		out = append(out, f)
		at = f.Start + f.Duration + between(0.2, 1)
	}
	return out
}
