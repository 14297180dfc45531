package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionTTL is the term lease of every contender of the failover
// benchmark: etcd leases count whole seconds, so both etcd contenders get
// the same 2 s; a crashed leader's term ends at the server when it expires.
const electionTTL = 2 * time.Second

// campaigner is one process taking part in an election: it campaigns
// once and its term then either resigns or crashes (stops renewing
// without telling the server: its client connection closed).
type campaigner interface {
	campaign(ctx context.Context, name string) error
	// write is the new leader's first write to the resource, valid only
	// under its term: fenced by the term's fence, or guarded by the
	// leader key's revision for concurrency.Election.
	write(ctx context.Context, resource string) error
	resign(ctx context.Context) error
	crash()
	close()
}

// electionContenders are the failover benchmark's contenders, each making
// a campaigner with a client of its own (a process).
var electionContenders = []struct {
	name string
	new  func(b *testing.B, e *env) campaigner
}{
	{"fencedlock-etcd", func(b *testing.B, e *env) campaigner {
		be, c := e.newEtcdBackend(b)
		return newFencedCampaigner(b, be, func() { _ = c.Close() },
			func(ctx context.Context, key, v string, t *election.Term) error {
				return be.FencedPut(ctx, key, v, t.Fence(), t.Holder())
			})
	}},
	{"etcd-concurrency-election", func(b *testing.B, e *env) campaigner {
		c := e.newEtcd(b)
		return &etcdCampaigner{c: c, ttl: ttlSeconds(electionTTL)}
	}},
	{"fencedlock-redis", func(b *testing.B, e *env) campaigner {
		be, c := e.newRedisBackend(b)
		return newFencedCampaigner(b, be, c.Close,
			func(ctx context.Context, key, v string, t *election.Term) error {
				return be.FencedSet(ctx, key, v, t.Fence(), t.Holder())
			})
	}},
}

// fencedCampaigner is a campaigner of package election on a fencedlock
// backend; crash closes the backend's client under it.
type fencedCampaigner struct {
	el       *election.Election
	term     *election.Term
	crashFn  func()
	writeFn  func(ctx context.Context, key, v string, t *election.Term) error
	closeAll func()
}

func newFencedCampaigner(b *testing.B, be driver.Backend, closeClient func(), write func(context.Context, string, string, *election.Term) error) *fencedCampaigner {
	el, err := election.New(be, fencedlock.Options{TTL: electionTTL})
	if err != nil {
		b.Fatal(err)
	}
	return &fencedCampaigner{el: el, crashFn: closeClient, writeFn: write,
		closeAll: func() { el.Close(); be.Close(); closeClient() }}
}

func (f *fencedCampaigner) campaign(ctx context.Context, name string) (err error) {
	f.term, err = f.el.Campaign(ctx, name, []byte("bench"))
	return err
}

func (f *fencedCampaigner) write(ctx context.Context, resource string) error {
	return f.writeFn(ctx, resource, strconv.FormatUint(uint64(f.term.Fence()), 10), f.term)
}

func (f *fencedCampaigner) resign(ctx context.Context) error { return f.term.Resign(ctx) }
func (f *fencedCampaigner) crash()                           { f.crashFn() }
func (f *fencedCampaigner) close()                           { f.closeAll() }

// etcdCampaigner is etcd's concurrency.Election on a Session of its own;
// crash closes the client, so the session's lease is not revoked and
// expires at its TTL.
type etcdCampaigner struct {
	c   *clientv3.Client
	ttl int
	s   *concurrency.Session
	el  *concurrency.Election
}

func (c *etcdCampaigner) campaign(ctx context.Context, name string) error {
	s, err := concurrency.NewSession(c.c, concurrency.WithTTL(c.ttl))
	if err != nil {
		return err
	}
	c.s, c.el = s, concurrency.NewElection(s, "/bench-election/"+name)
	return c.el.Campaign(ctx, "bench")
}

// write is the write an etcd user guards with the leader key: a Txn that
// puts only while the leader key still has the revision it was created
// with (the recipe's own fence).
func (c *etcdCampaigner) write(ctx context.Context, resource string) error {
	resp, err := c.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.el.Key()), "=", c.el.Rev())).
		Then(clientv3.OpPut("/bench-election-resource/"+resource, strconv.FormatInt(c.el.Rev(), 10))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("bench: leader key %s gone", c.el.Key())
	}
	return nil
}

func (c *etcdCampaigner) resign(ctx context.Context) error { return c.el.Resign(ctx) }
func (c *etcdCampaigner) crash()                           { _ = c.c.Close() }
func (c *etcdCampaigner) close() {
	if c.s != nil {
		_ = c.s.Close()
	}
	_ = c.c.Close()
}

// BenchmarkElectionFailover: the time from a leader's resignation or crash
// to the next leader's first valid write (its Campaign returning, then one
// write guarded by its term), with one follower already campaigning. Each
// operation elects a fresh leader (untimed), starts the follower and lets
// it queue (50 ms, untimed), then times the failover. A resignation is
// bounded by the backend's hand-off (the follower's wake-up and grant); a
// crash by the leader's lease, which the server expires at its TTL (2 s
// here): ns/op is then about TTL minus the time the crashed leader's last
// renewal had left, the "max-ms" metric the worst case seen. Run with
// -benchtime=Nx (a crash costs seconds).
func BenchmarkElectionFailover(b *testing.B) {
	e := servers(b)
	for _, how := range []string{"resign", "crash"} {
		for _, ec := range electionContenders {
			b.Run(ec.name+"/"+how, func(b *testing.B) {
				var worst time.Duration
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					d := failoverOnce(b, e, ec.new, how, fmt.Sprintf("failover-%s-%d-%d", how, time.Now().UnixNano(), i))
					worst = max(worst, d)
					b.StartTimer()
				}
				b.StopTimer()
				b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-ms")
			})
		}
	}
}

// failoverOnce elects a leader on name, queues a follower, ends the
// leader's term by how, and returns the time to the follower's first
// valid write; it adds that time to the benchmark's timer itself.
func failoverOnce(b *testing.B, e *env, newC func(*testing.B, *env) campaigner, how, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, follower := newC(b, e), newC(b, e)
	defer leader.close()
	defer follower.close()
	if err := leader.campaign(ctx, name); err != nil {
		b.Fatalf("leader's campaign: %v", err)
	}
	won := make(chan error, 1)
	go func() { won <- follower.campaign(ctx, name) }()
	time.Sleep(50 * time.Millisecond) // the follower queues
	select {
	case err := <-won:
		b.Fatalf("follower won while the leader held the term: %v", err)
	default:
	}
	b.StartTimer()
	start := time.Now()
	if how == "crash" {
		leader.crash()
	} else if err := leader.resign(ctx); err != nil {
		b.Fatalf("resign: %v", err)
	}
	if err := <-won; err != nil {
		b.Fatalf("follower's campaign: %v", err)
	}
	if err := follower.write(ctx, name); err != nil {
		b.Fatalf("new leader's first write: %v", err)
	}
	d := time.Since(start)
	b.StopTimer()
	if err := follower.resign(ctx); err != nil {
		b.Fatalf("follower's resign: %v", err)
	}
	return d
}
