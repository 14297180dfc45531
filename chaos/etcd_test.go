package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"
	"go.uber.org/zap"

	"github.com/fencedlock/fencedlock/backend/etcd"
)

// etcdCluster is an in-process 3-member etcd cluster on loopback TCP (the
// workers are other processes), as backend/etcd/clustertest starts it.
type etcdCluster struct {
	clus  *integration.Cluster
	addrs []string // members' client addresses, host:port
	admin *clientv3.Client
	b     *etcd.Backend
}

func startEtcd(t *testing.T) *etcdCluster {
	t.Helper()
	// As in clustertest: 300ms elections keep a loaded 2-core machine
	// running -race from changing leaders spuriously.
	integration.ElectionTicks = 30
	integration.BeforeTest(t, integration.WithoutGoLeakDetection())
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 3, UseTCP: true})
	t.Cleanup(func() { clus.Terminate(t) })
	e := &etcdCluster{clus: clus}
	for _, m := range clus.Members {
		u, err := url.Parse(m.GRPCURL)
		if err != nil {
			t.Fatal(err)
		}
		e.addrs = append(e.addrs, strings.Replace(u.Host, "localhost", "127.0.0.1", 1))
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: e.addrs, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.admin = c
	if e.b, err = etcd.New(c, etcd.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	return e
}

func (e *etcdCluster) register(key string) register {
	return &etcdRegister{b: e.b, c: e.admin, key: key}
}

// delLock deletes the queue of lockKey: its holder's entry and every
// waiter's, as an operator's `etcdctl del --prefix` would. It returns how
// many entries it deleted and the holder id of the lease whose entry it
// deleted (the entry with the smallest create revision, whose value is
// the holder id), "" if the queue was empty.
func (e *etcdCluster) delLock(ctx context.Context, lockKey string) (n int64, holder string, err error) {
	resp, err := e.admin.Delete(ctx, etcd.DefaultKeyPrefix+"locks/"+url.PathEscape(lockKey)+"/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil {
		return 0, "", err
	}
	var first int64
	for _, kv := range resp.PrevKvs {
		if holder == "" || kv.CreateRevision < first {
			first, holder = kv.CreateRevision, string(kv.Value)
		}
	}
	return resp.Deleted, holder, nil
}

// fault applies an etcd member fault and returns its heal.
func (e *etcdCluster) fault(t *testing.T, f Fault) (heal func(), note string) {
	m := e.clus.Members[f.Member]
	switch f.Kind {
	case FaultMemberKill:
		m.Stop(t)
		return func() {
			if err := m.Restart(t); err != nil {
				t.Fatalf("restarting member %d: %v", f.Member, err)
			}
		}, fmt.Sprintf("member %d", f.Member)
	case FaultPartition:
		var others []*integration.Member
		for i, o := range e.clus.Members {
			if i != f.Member {
				others = append(others, o)
			}
		}
		m.InjectPartition(t, others...)
		return func() { m.RecoverPartition(t, others...) }, fmt.Sprintf("member %d", f.Member)
	case FaultLeaderChange:
		lead := e.clus.WaitLeader(t)
		to := (lead + 1 + f.Member%2) % 3
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ls := e.clus.Members[lead].Server
		err := ls.MoveLeader(ctx, uint64(ls.MemberID()), uint64(e.clus.Members[to].Server.MemberID()))
		return func() {}, fmt.Sprintf("member %d -> %d (err %v)", lead, to, err)
	}
	t.Fatalf("not an etcd fault: %s", f.Kind)
	return nil, ""
}

// etcdKinds are the faults of the etcd setup.
var etcdKinds = []FaultKind{FaultPauseWorker, FaultPauseHolder, FaultBlackhole, FaultLatency, FaultReset,
	FaultMemberKill, FaultPartition, FaultLeaderChange, FaultDelLock}

// TestChaosEtcd: a 3-member etcd cluster, the register an etcd key behind
// FencedPut; worker, network and member faults.
func TestChaosEtcd(t *testing.T) {
	e := startEtcd(t)
	runEtcdSeeds(t, &setup{name: "etcd", register: RegisterEtcd, kinds: etcdKinds, etcd: e}, "etcd-3-member")
}

// etcdRun is the run of seed on etcd: a TTL of at least 2s (etcd leases
// are whole seconds), schedules of at least 4 TTLs.
func etcdRun(seed uint64) runConfig {
	rc := defaultRun(seed)
	rc.ttl = max(*flagTTL, 2*time.Second)
	rc.length = max(rc.length, 4*rc.ttl)
	return rc
}

// runEtcdSeeds runs every seed on the etcd setup s, the workers' Work
// half the TTL, requires each run safe (an operator's deletion of the
// lock's queue excused) and prints the stats under name.
func runEtcdSeeds(t *testing.T, s *setup, name string) {
	t.Helper()
	s.work = etcdRun(0).ttl / 2
	st := newStats(name)
	for _, seed := range seeds(t) {
		r := run(t, s, etcdRun(seed))
		st.add(r)
		requireSafe(t, st.name, seed, r, FaultDelLock)
	}
	st.print(t)
	if st.grants == 0 {
		t.Fatalf("%s: no lease granted in %d schedules: the workload did not run", name, st.runs)
	}
}
