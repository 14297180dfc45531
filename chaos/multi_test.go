package chaos

import "testing"

// multiSetup makes s the set workload (ModeMulti).
func multiSetup(s *setup) *setup {
	s.mode = ModeMulti
	return s
}

// TestChaosMultiRedis: the set workload on Redis standalone: sets of
// LockKey and 0 to 6 other keys, taken at once (one script), one lease
// each. LockKey's history is checked as a lock's: at most one valid set
// at a time, its fences strictly increasing, no stale write accepted by
// the register's guard, the register linearizable and equal to its
// applied increments; every fault of a standalone server, including the
// operator's deletion of LockKey (which must end the set's lease).
func TestChaosMultiRedis(t *testing.T) {
	runSeeds(t, multiSetup(newRedisSetup(t, "multi-redis", false)), "multi-redis")
}

// TestChaosNegativeMultiSplit is a negative control: sets split by
// worker parity over two disjoint first keys, writing one register, with
// no fault, are two holders at once and must fail (b).
func TestChaosNegativeMultiSplit(t *testing.T) {
	s := multiSetup(newRedisSetup(t, "multi-split", false))
	s.kinds, s.split = nil, true
	s.minWork = s.work / 2 // holders keep their sets a while, so two overlap
	requireBreaks(t, control(t, s, "two disjoint families of sets, one register"), "two holders at once")
}

// TestChaosMultiEtcd: TestChaosMultiRedis on a 3-member etcd cluster (one
// Txn on one lease per set), with member faults and the deletion of
// LockKey's entry.
func TestChaosMultiEtcd(t *testing.T) {
	s := multiSetup(&setup{name: "multi-etcd", register: RegisterEtcd, kinds: etcdKinds, etcd: startEtcd(t)})
	runEtcdSeeds(t, s, "multi-etcd")
}
