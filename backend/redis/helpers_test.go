package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/rediscore/rediscoretest"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// After a topology refresh a cluster client closes the connections
		// it replaced 5s later, in a goroutine of its own (rueidis
		// cluster.go, _refresh), even after Close: bounded, not ours.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	)
}

// newBackend returns a Backend on its own new client of srv, closed at the
// end of the test (backend first, then client).
func newBackend(t testing.TB, srv *testserver.Redis, opts Options) (*Backend, rueidis.Client) {
	t.Helper()
	c := srv.Client(t, nil)
	b, err := New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, c
}

// startBackend returns a Backend with the default Options on a new
// redis-server of its own, and its client: for the tests that need no
// more of the server than the client.
func startBackend(t testing.TB) (*Backend, rueidis.Client) {
	t.Helper()
	return newBackend(t, testserver.StartRedis(t), Options{})
}

// startReplicated starts a primary with one replica, waits until the
// replica is in sync, and returns the primary and a client of the replica.
func startReplicated(t testing.TB) (*testserver.Redis, rueidis.Client) {
	t.Helper()
	primary := testserver.StartRedis(t)
	replica := testserver.StartRedis(t, testserver.WithReplicaOf(primary))
	rc := replica.Client(t, nil)
	waitFor(t, 10*time.Second, "replica sync", func() bool {
		return strings.Contains(str(t, rc, "INFO", "replication"), "master_link_status:up")
	})
	return primary, rc
}

// openBackend returns a Backend on a new client of srv; closing both is
// the test's own business (no cleanup does it), for tests of closing.
func openBackend(t testing.TB, srv *testserver.Redis) (*Backend, rueidis.Client) {
	t.Helper()
	c, err := rueidis.NewClient(srv.ClientOption())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

// newMini returns a Backend on a miniredis server, for fast unit tests.
func newMini(t testing.TB) (*Backend, *miniredis.Miniredis, rueidis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, m, c
}

// do runs a command given as strings on c and fails the test on error.
func do(t testing.TB, c rueidis.Client, args ...string) rueidis.RedisResult {
	t.Helper()
	return c.Do(context.Background(), c.B().Arbitrary(args...).Build())
}

func str(t testing.TB, c rueidis.Client, args ...string) string {
	t.Helper()
	s, err := do(t, c, args...).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("%v: %v", args, err)
	}
	return s
}

func num(t testing.TB, c rueidis.Client, args ...string) int64 {
	t.Helper()
	n, err := do(t, c, args...).AsInt64()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return n
}

var ownerSeq struct {
	mu sync.Mutex
	n  int
}

// owner returns a fresh owner token for tests.
func owner() string {
	ownerSeq.mu.Lock()
	defer ownerSeq.mu.Unlock()
	ownerSeq.n++
	return fmt.Sprintf("test-owner-%d-%d", time.Now().UnixNano(), ownerSeq.n)
}

func acquire(t testing.TB, b *Backend, key string, ttl time.Duration) driver.Grant {
	t.Helper()
	g, err := b.Acquire(context.Background(), driver.AcquireRequest{Key: key, Owner: owner(), TTL: ttl})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return g
}

// waitFor polls cond every 5ms for at most d (test helper only).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// commandStats returns the calls per command from INFO commandstats,
// without the commands of a connection rueidis (re)opens or checks
// meanwhile (HELLO, AUTH, CLIENT SETINFO/SETNAME, its idle PING): they
// are no operation's cost. A loaded run counted a HELLO in one acquire's
// commands (TestAcquireAbandonedSetChecked).
func commandStats(t testing.TB, c rueidis.Client) map[string]int64 {
	t.Helper()
	info := str(t, c, "INFO", "commandstats")
	stats := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				cmd := strings.TrimPrefix(name, "cmdstat_")
				if !connectionCommand(cmd) {
					stats[cmd] = n
				}
			}
		}
	}
	return stats
}

// opStats is commandStats since the test's CONFIG RESETSTAT less the
// test's own commands: that CONFIG RESETSTAT, its INFO, and those named
// in also.
func opStats(t testing.TB, c rueidis.Client, also ...string) map[string]int64 {
	t.Helper()
	stats := commandStats(t, c)
	for _, k := range append([]string{"config|resetstat", "info"}, also...) {
		delete(stats, k)
	}
	return stats
}

// connectionCommand reports whether cmd (a name of INFO commandstats or
// MONITOR) sets up or checks a connection.
func connectionCommand(cmd string) bool {
	switch cmd {
	case "hello", "auth", "ping", "client":
		return true
	}
	return strings.HasPrefix(cmd, "client|")
}

// monitor counts the commands the server receives from clients (not from
// scripts) through a raw MONITOR connection: one per round trip of a
// client that sends one command per round trip.
type monitor struct {
	conn  net.Conn
	mu    sync.Mutex
	cmds  []string // command names received from clients
	lines chan struct{}
	done  chan struct{}
}

func startMonitor(t testing.TB, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: conn, lines: make(chan struct{}, 1024), done: make(chan struct{})}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	ok, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(ok, "+OK") {
		t.Fatalf("MONITOR: %q %v", ok, err)
	}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1700000000.000000 [0 127.0.0.1:1234] "evalsha" "..." ...
			_, rest, ok := strings.Cut(line, "[")
			if !ok {
				continue
			}
			src, rest, _ := strings.Cut(rest, "]")
			if strings.HasSuffix(src, " lua") {
				continue // called by a script, not a round trip
			}
			name := strings.Trim(strings.Fields(rest)[0], `"`)
			m.mu.Lock()
			m.cmds = append(m.cmds, strings.ToLower(name))
			m.mu.Unlock()
			select {
			case m.lines <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(m.stop)
	return m
}

func (m *monitor) stop() {
	m.conn.Close()
	<-m.done
}

// sync sends a marker through c and waits until the monitor saw it, so
// every command sent before it has been counted; the marker is dropped.
func (m *monitor) sync(t testing.TB, c rueidis.Client) []string {
	t.Helper()
	marker := "monitor-marker-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	do(t, c, "ECHO", marker)
	var got []string
	deadline := time.After(5 * time.Second)
	for {
		m.mu.Lock()
		for i, name := range m.cmds {
			if name == "echo" {
				got = append(got, m.cmds[:i]...)
				m.cmds = append([]string(nil), m.cmds[i+1:]...)
				m.mu.Unlock()
				return got
			}
		}
		m.mu.Unlock()
		select {
		case <-m.lines:
		case <-deadline:
			t.Fatal("monitor: marker not seen within 5s")
		}
	}
}

func isNotHeld(err error) bool { return errors.Is(err, driver.ErrNotHeld) }

// adapter is this backend's constructors for the test bodies both Redis
// adapters run (internal/rediscore/rediscoretest): rueidis clients with
// their default options (no client-side cache).
var adapter = rediscoretest.Adapter[rueidis.Client]{
	Client: func(t testing.TB, addr, user, password string) rueidis.Client {
		t.Helper()
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: password, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	},
	Cluster: func(t testing.TB, cl *testserver.RedisCluster) rueidis.Client { return cl.Client(t, nil) },
	Sentinel: func(t testing.TB, g *testserver.Sentinels, primary *testserver.Redis) rueidis.Client {
		return g.Client(t, primary, nil)
	},
	New: func(c rueidis.Client, replicas int, timeout time.Duration) (rediscoretest.FullBackend, error) {
		return New(c, Options{WaitReplicas: replicas, WaitTimeout: timeout})
	},
	Fixture: fixture,
}

// fixture is the Store of b (a *Backend), whose client is c, for the
// shared tests.
func fixture(b rediscoretest.FullBackend, c rueidis.Client) rediscoretest.Fixture {
	do := func(ctx context.Context, args ...string) (string, error) { // args: command, key, more
		// The key is args[1]: routed to its slot's node on a Cluster.
		m, err := c.Do(ctx, c.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()).ToMessage()
		if err != nil {
			return "", err
		}
		if n, err := m.AsInt64(); err == nil {
			return strconv.FormatInt(n, 10), nil
		}
		s, _ := m.ToString()
		return s, nil
	}
	return rediscoretest.Fixture{Store: NewStore(b.(*Backend)), Do: do}
}

// TestCore runs the test bodies both Redis adapters run
// (internal/rediscore/rediscoretest.Run) on this one's adapter.
func TestCore(t *testing.T) { rediscoretest.Run(t, adapter) }

// BenchmarkCore runs the microbenchmarks both Redis adapters run
// (internal/rediscore/rediscoretest.RunBenchmarks) on this one's adapter.
func BenchmarkCore(b *testing.B) { rediscoretest.RunBenchmarks(b, adapter) }
