package chaos

import "testing"

// rwSetup makes s the read-write workload (mode ModeRW or ModeRWBroken).
func rwSetup(s *setup, mode string) *setup {
	s.mode = mode
	s.kinds = withoutDelLock(s.kinds) // the nemesis's deletion knows a lock's key, not a read-write lock's
	return s
}

// TestChaosRWRedis: the read-write workload on Redis standalone (5
// workers, three rounds in four readers): a write lease never valid with
// another lease by the history, read leases overlapping, fences strictly
// increasing over readers and writers, no stale write accepted by the
// register's guard, the register linearizable (readers' reads included)
// and equal to its applied increments; every fault of a standalone server
// but the operator's deletion.
func TestChaosRWRedis(t *testing.T) {
	runSeeds(t, rwSetup(newRedisSetup(t, "rw-redis", false), ModeRW), "rw-redis")
}

// TestChaosNegativeRWShared is a negative control: workers that take
// only read leases, one round in four recorded as a writer's, with no
// fault, must break (b): a writer valid together with other leases.
func TestChaosNegativeRWShared(t *testing.T) {
	s := rwSetup(newRedisSetup(t, "rw-shared", false), ModeRWBroken)
	s.kinds = nil
	requireBreaks(t, control(t, s, "writers holding read leases"), "a writer with other leases")
}

// TestChaosRWEtcd: TestChaosRWRedis on a 3-member etcd cluster, with
// member faults.
func TestChaosRWEtcd(t *testing.T) {
	s := rwSetup(&setup{name: "rw-etcd", register: RegisterEtcd, kinds: etcdKinds, etcd: startEtcd(t)}, ModeRW)
	runEtcdSeeds(t, s, "rw-etcd")
}
