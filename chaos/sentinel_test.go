package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// replLag is added to the replication link, each way, so that a replica
// lags as it would under load and a failover loses the latest writes.
const replLag = 100 * time.Millisecond

// sentinelDeploy is one master, one replica behind a lagging fault proxy,
// and three sentinels: one per seed, since a failover changes it.
type sentinelDeploy struct {
	t       *testing.T
	master  *testserver.Redis
	servers []*testserver.Redis
	lags    []*faultproxy.Proxy
	g       *testserver.Sentinels
	wait    int
	admin   rueidis.Client
	adminB  *redis.Backend
}

func newSentinelDeploy(t *testing.T, wait int) *sentinelDeploy {
	t.Helper()
	d := &sentinelDeploy{t: t, wait: wait}
	d.master = testserver.StartRedis(t)
	d.servers = append(d.servers, d.master)
	d.addReplica()
	d.g = testserver.StartSentinels(t, d.master, 3, testserver.SentinelOptions{})
	d.g.WaitReady(t, 1)
	d.admin = d.g.Client(t, d.master, nil)
	b, err := redis.New(d.admin, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.adminB = b
	return d
}

// addReplica starts a replica of the master through a lagging proxy and
// waits (at most 10s) for its link to come up.
func (d *sentinelDeploy) addReplica() {
	t := d.t
	px, err := faultproxy.New(d.master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	px.SetLatency(replLag)
	d.lags = append(d.lags, px)
	_, port, _ := strings.Cut(px.Addr(), ":")
	r := testserver.StartRedis(t, testserver.WithConfig("replicaof 127.0.0.1 "+port))
	d.servers = append(d.servers, r)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		out, err := r.CLI(t, "INFO", "replication")
		if err == nil && strings.Contains(out, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never synced: %s %v", out, err)
		}
	}
}

func (d *sentinelDeploy) addrs() []string {
	var out []string
	for _, s := range d.g.Nodes {
		out = append(out, s.Addr)
	}
	return out
}

func (d *sentinelDeploy) delLock(ctx context.Context, lockKey string) (n int64, holder string, err error) {
	return delRedisLock(ctx, d.admin, d.adminB.LockKey(lockKey))
}

// failover kills the master; its heal waits (at most 15s) for the
// sentinels to promote the replica and gives the new master a fresh
// replica, so WAIT can be satisfied again.
func (d *sentinelDeploy) failover(t *testing.T) (heal func(), note string) {
	old := d.master
	if old == nil {
		return func() {}, "no master to kill (an earlier promotion did not happen)"
	}
	old.Kill()
	d.master = nil
	return func() {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if addr := d.g.MasterAddr(t); addr != old.Addr {
				for _, s := range d.servers {
					if s.Addr == addr {
						d.master = s
					}
				}
				if d.master == nil {
					t.Fatalf("sentinels promoted %s, not a server of this deployment", addr)
				}
				d.addReplica()
				return
			}
			if time.Now().After(deadline) {
				return // no promotion: the rest of the run has no master
			}
		}
	}, "killed " + old.Addr
}

// stop stops every process of the deployment (a 100-seed run would
// otherwise keep hundreds alive until the test ends).
func (d *sentinelDeploy) stop() {
	d.admin.Close()
	for _, s := range d.g.Nodes {
		s.Stop()
	}
	for _, s := range d.servers {
		s.Stop()
	}
	for _, px := range d.lags {
		px.Close()
	}
}

// sentinelKinds are the faults of the Sentinel setup; network faults hit
// the register's (PostgreSQL) link, the only one behind a proxy.
var sentinelKinds = []FaultKind{FaultPauseWorker, FaultPauseHolder, FaultBlackhole, FaultLatency, FaultReset, FaultFailover, FaultDelLock}

// TestChaosSentinel: the lock on Redis Sentinel (one master, one replica
// lagging by replLag each way, three sentinels), without and with
// WaitReplicas 1; the register a PostgreSQL row behind fencing.SQLTable,
// so that a failover's lost writes hit the lock only. A failover may
// break (b) and (c) (counted per fault); (a), (d), (e) must hold.
func TestChaosSentinel(t *testing.T) {
	runSentinel(t, "sentinel", []int{0, 1}, func(s *setup) *setup { return s })
}

// TestChaosSentinelSemaphore: the semaphore workload (limit 3, 5 workers,
// a PostgreSQL row per slot) on TestChaosSentinel's deployment with
// WaitReplicas 1 (the configuration for safety; without it a failover
// loses grants as it does for the lock, which TestChaosSentinel shows): a failover
// may break the limit or a slot's exclusion (counted per fault); no stale
// write is accepted by a slot's guard, each slot's register is
// linearizable.
func TestChaosSentinelSemaphore(t *testing.T) {
	runSentinel(t, "sentinel-sema", []int{1}, func(s *setup) *setup { return semaphoreSetup(s, semaLimit) })
}

// TestChaosSentinelElection: the election workload on TestChaosSentinel's
// deployment with WaitReplicas 1: a failover may let two terms overlap (counted per fault);
// no write of a resigned, lost or paused leader is accepted by the
// register's guard.
func TestChaosSentinelElection(t *testing.T) {
	runSentinel(t, "sentinel-election", []int{1}, func(s *setup) *setup { s.mode = ModeElection; return s })
}

// runSentinel runs the seeds of the Sentinel deployment for each
// WaitReplicas of waits, each setup shaped by shape (the workload).
func runSentinel(t *testing.T, prefix string, waits []int, shape func(*setup) *setup) {
	pg, db := startSQLRegister(t)
	ttl := max(*flagTTL, time.Second) // room for WAIT over the lagging link
	for _, wait := range waits {
		name := fmt.Sprintf("%s-wait%d", prefix, wait)
		t.Run(fmt.Sprintf("sentinel-wait%d", wait), func(t *testing.T) {
			st := newStats("redis-" + name)
			for _, seed := range seeds(t) {
				d := newSentinelDeploy(t, wait)
				s := shape(&setup{name: name, register: RegisterSQL, kinds: sentinelKinds, sentinel: d, pg: pg, db: db,
					admin: d.admin, adminB: d.adminB, work: ttl / 2})
				rc := defaultRun(seed)
				rc.ttl = ttl
				rc.length = max(rc.length, 6*ttl)
				r := run(t, s, rc)
				d.stop()
				st.add(r)
				requireSafe(t, st.name, seed, r, FaultDelLock, FaultFailover)
			}
			st.print(t)
			if st.grants == 0 {
				t.Fatalf("%s: no lease granted in %d schedules: the workload did not run", name, st.runs)
			}
		})
	}
}
