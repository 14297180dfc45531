package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/clitest"
	"github.com/redis/rueidis"
)

// PingPong: the floor of a pub/sub hand-off, with no lock library. Process
// A publishes a ping; process B, subscribed, wakes and publishes a pong on
// another channel; A, subscribed to that one, wakes. The round trip has
// the same hops and wake-ups as a pub/sub hand-off of a lock (release
// script, the server's message wakes the waiter, the waiter's acquire
// script, its reply wakes the waiter again), so it is what fencedlock's
// fair-path hand-off latency and longest free-lock gap are compared
// with: on a shared machine the scheduler's delay in waking a process is
// in both.

// pongChildEnv, when set (to a JSON pongSpec), turns the test binary into
// PingPong's responder process (TestMain).
const pongChildEnv = "FENCEDLOCK_BENCH_PONG"

// pongChildLimit bounds the life of a responder process whose parent
// never closes its standard input.
const pongChildLimit = 10 * time.Minute

// pongTimeout is how long PingPong waits for one pong before it counts the
// ping lost and ends the run.
const pongTimeout = 2 * time.Second

// pingPongVariants are PingPong's sub-benchmarks: the responder in its own
// process (procs=2) or on a client of its own in the benchmark's process
// (procs=1, as Contended's and Handoff's workers, which share one process),
// and a pause between rounds of 0 (as Contended's back-to-back hand-offs)
// or handoffHold (as Handoff's holder, so both processes go idle between
// rounds).
var pingPongVariants = []struct {
	procs int
	pause time.Duration
}{{2, 0}, {2, handoffHold}, {1, 0}}

// pongSpec is what the responder needs: the server and the two channels.
type pongSpec struct {
	Addr     string `json:"addr"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	DB       int    `json:"db,omitempty"`
	Ping     string `json:"ping"`
	Pong     string `json:"pong"`
}

// newPongSpec returns the spec of a ping-pong on the benchmark's Redis on
// channels named after name.
func (e *env) newPongSpec(name string) pongSpec {
	o := e.redisOpt
	return pongSpec{Addr: o.InitAddress[0], Username: o.Username, Password: o.Password, DB: o.SelectDB,
		Ping: key("pingpong", name, 0) + ":ping", Pong: key("pingpong", name, 0) + ":pong"}
}

func (s pongSpec) client() (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, Username: s.Username, Password: s.Password,
		SelectDB: s.DB, DisableCache: true})
}

// ponger answers every message on s.Ping with one on s.Pong: the message
// and the wall-clock time (Unix ns) it arrived. It returns when ctx ends
// (nil) or the subscription or a publish fails.
func ponger(ctx context.Context, c rueidis.Client, s pongSpec) error {
	msgs := make(chan string, 64)
	sub := make(chan error, 1)
	go func() {
		sub <- c.Receive(ctx, c.B().Subscribe().Channel(s.Ping).Build(), func(m rueidis.PubSubMessage) {
			select {
			case msgs <- m.Message + " " + strconv.FormatInt(time.Now().UnixNano(), 10):
			case <-ctx.Done():
			}
		})
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-sub:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: ping-pong subscription ended: %w", err)
		case m := <-msgs:
			if err := c.Do(ctx, c.B().Publish().Channel(s.Pong).Message(m).Build()).Error(); err != nil && ctx.Err() == nil {
				return fmt.Errorf("bench: pong: %w", err)
			}
		}
	}
}

// runPongChild is the body of the responder process: it answers pings
// until its standard input closes (the parent stopped or died), or
// pongChildLimit.
func runPongChild(spec string) int {
	var s pongSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "bench: pong spec:", err)
		return 1
	}
	c, err := s.client()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: pong client:", err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), pongChildLimit)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("READY pong")
	if err := ponger(ctx, c, s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// pingResult is the outcome of one PingPong run.
type pingResult struct {
	rtt    hist // from publishing a ping to holding its pong
	oneWay hist // from publishing a ping to the responder holding it
	sum    time.Duration
	lost   int // pings without a pong within pongTimeout (the run then stops)
	// The process's allocations over the rounds (the responder's too
	// when it runs in this process).
	mallocs, bytes uint64
}

// runPingPong starts the responder (in a child process when procs is 2,
// else on a client of its own here), then pings it for d or rounds round
// trips, pausing pause after each.
func runPingPong(tb testing.TB, e *env, procs int, pause, d time.Duration, rounds int) pingResult {
	tb.Helper()
	spec := e.newPongSpec(fmt.Sprintf("procs=%d,pause=%v", procs, pause))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if procs == 2 {
		js, err := json.Marshal(spec)
		if err != nil {
			tb.Fatalf("bench: %v", err)
		}
		_, stop, err := clitest.StartSelf("ping-pong responder", pongChildEnv, string(js))
		if err != nil {
			tb.Fatalf("bench: %v", err)
		}
		defer stop()
	} else {
		c, err := spec.client()
		if err != nil {
			tb.Fatalf("bench: %v", err)
		}
		defer c.Close()
		done := make(chan error, 1)
		go func() { done <- ponger(ctx, c, spec) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("%v", err)
			}
		}()
	}
	a, err := spec.client()
	if err != nil {
		tb.Fatalf("bench: %v", err)
	}
	defer a.Close()
	pongs := make(chan string, 64)
	go func() {
		_ = a.Receive(ctx, a.B().Subscribe().Channel(spec.Pong).Build(), func(m rueidis.PubSubMessage) {
			select {
			case pongs <- m.Message:
			case <-ctx.Done():
			}
		})
	}()
	p := &pinger{ctx: ctx, c: a, spec: spec, pongs: pongs}
	if err := p.handshake(10 * time.Second); err != nil {
		tb.Fatalf("bench: %v", err)
	}
	var res pingResult
	m0 := readMem()
	start := time.Now()
	for n := 1; n <= rounds && time.Since(start) < d; n++ {
		rtt, oneWay, err := p.round(n)
		if errors.Is(err, errPongLost) {
			res.lost++
			break
		}
		if err != nil {
			tb.Fatalf("bench: %v", err)
		}
		res.rtt.add(rtt)
		res.oneWay.add(oneWay)
		res.sum += rtt
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	m1 := readMem()
	res.mallocs, res.bytes = m1.mallocs-m0.mallocs, m1.bytes-m0.bytes
	return res
}

var errPongLost = errors.New("bench: no pong within " + pongTimeout.String())

// pinger is PingPong's side A.
type pinger struct {
	ctx   context.Context
	c     rueidis.Client
	spec  pongSpec
	pongs <-chan string
}

// handshake pings (round 0) until a pong comes back: both subscriptions
// are then in place. It gives up after limit.
func (p *pinger) handshake(limit time.Duration) error {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if err := p.publish(0, time.Now()); err != nil {
			return err
		}
		select {
		case <-p.pongs:
			// Drain the pongs of earlier handshake pings.
			for {
				select {
				case <-p.pongs:
				case <-time.After(50 * time.Millisecond):
					return nil
				}
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: ping-pong responder did not answer within %v", limit)
}

func (p *pinger) publish(n int, at time.Time) error {
	msg := strconv.Itoa(n) + " " + strconv.FormatInt(at.UnixNano(), 10)
	return p.c.Do(p.ctx, p.c.B().Publish().Channel(p.spec.Ping).Message(msg).Build()).Error()
}

// round publishes ping n and waits for its pong; it returns the round
// trip and the one-way time from the publish call to the responder
// holding the ping (wall clocks of one machine).
func (p *pinger) round(n int) (rtt, oneWay time.Duration, err error) {
	t0 := time.Now()
	if err := p.publish(n, t0); err != nil {
		return 0, 0, err
	}
	timeout := time.NewTimer(pongTimeout)
	defer timeout.Stop()
	for {
		select {
		case m := <-p.pongs:
			f := strings.Fields(m)
			if len(f) != 3 || f[0] != strconv.Itoa(n) {
				continue // a late pong of the handshake
			}
			rtt = time.Since(t0)
			at, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("bench: pong %q: %w", m, err)
			}
			return rtt, time.Duration(at - t0.UnixNano()), nil
		case <-timeout.C:
			return 0, 0, errPongLost
		}
	}
}

// BenchmarkPingPong: the bare pub/sub round trip between two processes
// (and within one), for -duration per variant (pingPongVariants). ns/op
// is the mean round trip; p50/p99/p999/max-ns its distribution (max is
// the longest gap, to be set beside Contended's longest free-lock gap);
// oneway-* the time from the publish call to the responder's wake-up.
func BenchmarkPingPong(b *testing.B) {
	e := serversDescribed(b)
	for _, v := range pingPongVariants {
		b.Run(fmt.Sprintf("procs=%d/pause=%v", v.procs, v.pause), func(b *testing.B) {
			d := scenarioDuration()
			where := "a child process"
			if v.procs == 1 {
				where = "this process"
			}
			b.Logf("pub/sub ping-pong, responder in %s, pause %v between rounds, %v", where, v.pause, d)
			r := runPingPong(b, e, v.procs, v.pause, d, 1<<30)
			n := float64(max(r.rtt.n, 1))
			b.ReportMetric(float64(r.sum.Nanoseconds())/n, "ns/op")
			b.ReportMetric(float64(r.mallocs)/n, "allocs/op")
			b.ReportMetric(float64(r.bytes)/n, "B/op")
			for _, q := range []struct {
				unit string
				q    float64
			}{{"p50-ns", 0.5}, {"p99-ns", 0.99}, {"p999-ns", 0.999}} {
				b.ReportMetric(float64(r.rtt.quantile(q.q)), q.unit)
				b.ReportMetric(float64(r.oneWay.quantile(q.q)), "oneway-"+q.unit)
			}
			b.ReportMetric(float64(r.rtt.max), "max-ns")
			b.ReportMetric(float64(r.oneWay.max), "oneway-max-ns")
			b.ReportMetric(float64(r.rtt.n), "rounds")
			b.ReportMetric(float64(r.lost), "lost")
		})
	}
}

// TestPingPong runs each ping-pong variant for a few rounds against the
// real server: every ping gets its pong, in order, and the one-way time
// is within the round trip. No speed is asserted.
func TestPingPong(t *testing.T) {
	e := servers(t)
	for _, v := range pingPongVariants {
		t.Run(fmt.Sprintf("procs=%d/pause=%v", v.procs, v.pause), func(t *testing.T) {
			r := runPingPong(t, e, v.procs, v.pause, 10*time.Second, 20)
			if r.lost != 0 || r.rtt.n != 20 {
				t.Fatalf("%d round trips, %d pings lost; want 20 and none", r.rtt.n, r.lost)
			}
			// Clocks of one machine: the ping reached the responder
			// before its pong came back (allow a clock step of 1 ms).
			if r.oneWay.max > r.rtt.max+time.Millisecond {
				t.Errorf("one-way max %v beyond round-trip max %v", r.oneWay.max, r.rtt.max)
			}
			t.Logf("round trip p50 %v max %v, one-way p50 %v", r.rtt.quantile(0.5), r.rtt.max, r.oneWay.quantile(0.5))
		})
	}
}
