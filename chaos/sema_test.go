package chaos

import (
	"slices"
	"testing"
)

// semaLimit is the semaphore workload's limit: below the 5 workers, so
// permits are contended and the limit is reached.
const semaLimit = 3

// withoutDelLock is kinds without FaultDelLock: the nemesis's deletion
// knows a lock's key, not a semaphore's slot keys.
func withoutDelLock(kinds []FaultKind) []FaultKind {
	return slices.DeleteFunc(slices.Clone(kinds), func(k FaultKind) bool { return k == FaultDelLock })
}

// semaphoreSetup makes s the semaphore workload: permits of limit, each
// slot with its own register written with the permit's fence.
func semaphoreSetup(s *setup, limit int) *setup {
	s.mode, s.limit, s.checkLimit = ModeSemaphore, limit, limit
	s.kinds = withoutDelLock(s.kinds)
	return s
}

// TestChaosSemaphoreRedis: the semaphore workload on Redis standalone
// (limit 3, 5 workers): at most 3 valid permits at once by the history,
// and per slot one valid permit at a time, fences strictly increasing, no
// stale write accepted by the slot register's guard, each slot's register
// linearizable and equal to its applied increments; every fault of a
// standalone server but the operator's deletion.
func TestChaosSemaphoreRedis(t *testing.T) {
	s := semaphoreSetup(newRedisSetup(t, "sema-redis", false), semaLimit)
	runSeeds(t, s, "semaphore-redis")
}

// TestChaosSemaphoreEtcd: TestChaosSemaphoreRedis on a 3-member etcd
// cluster, with member faults.
func TestChaosSemaphoreEtcd(t *testing.T) {
	s := semaphoreSetup(&setup{name: "sema-etcd", register: RegisterEtcd, kinds: etcdKinds, etcd: startEtcd(t)}, semaLimit)
	runEtcdSeeds(t, s, "semaphore-etcd")
}

// TestChaosElectionEtcd: the election workload on a 3-member etcd cluster:
// campaigners' terms never overlap in validity, term fences strictly
// increase, no write of a resigned or paused (SIGSTOP) leader is accepted,
// the register is linearizable.
func TestChaosElectionEtcd(t *testing.T) {
	s := &setup{name: "election-etcd", register: RegisterEtcd, kinds: etcdKinds, etcd: startEtcd(t), mode: ModeElection}
	runEtcdSeeds(t, s, "election-etcd")
}

// TestChaosElectionRedis: the election workload on Redis standalone
// (backend/redis's driver.Elector: proclaim.lua, the lock's fence as the
// term), with every fault of a standalone server: terms never overlap in
// validity, term fences strictly increase, no write of a resigned, lost or
// paused (SIGSTOP) leader is accepted, the register is linearizable.
func TestChaosElectionRedis(t *testing.T) {
	s := newRedisSetup(t, "election-redis", false)
	s.mode = ModeElection
	runSeeds(t, s, "election-redis")
}

// TestChaosNegativeSemaphoreOverLimit is a negative control: workers
// taking permits of 4 slots, checked against a limit of 3, with no fault,
// must break the limit: the per-slot checks pass (each slot is a correct
// lock), so only the count of valid permits over all slots catches it.
func TestChaosNegativeSemaphoreOverLimit(t *testing.T) {
	s := semaphoreSetup(newRedisSetup(t, "sema-over", false), semaLimit+1)
	s.checkLimit = semaLimit
	s.kinds = nil
	s.minWork = s.work / 2 // holders keep their permits a while, so 4 are held at once
	r := control(t, s, "one slot more than the limit")
	if len(r.report.OverLimit) == 0 {
		t.Fatalf("negative control: %d slots passed a limit of %d; the checker has no teeth", semaLimit+1, semaLimit)
	}
}

// TestChaosNegativeSemaphoreBypass is a negative control: the semaphore
// workload with the slot registers' guard bypassed (plain HSET), under
// paused holders, must fail (a).
func TestChaosNegativeSemaphoreBypass(t *testing.T) {
	bypassControl(t, semaphoreSetup(newRedisSetup(t, "sema-bypass", false), semaLimit), "slot registers' guard bypassed")
}

// TestChaosNegativeElectionSplit is a negative control: campaigners split
// over two elections (by worker parity) writing one register, with no
// fault, are two leaders at once and must fail (b).
func TestChaosNegativeElectionSplit(t *testing.T) {
	s := &setup{name: "election-split", register: RegisterEtcd, etcd: startEtcd(t), mode: ModeElection, split: true}
	s.work = etcdRun(0).ttl / 2
	requireBreaks(t, control(t, s, "two elections, one register"), "two leaders at once")
}
