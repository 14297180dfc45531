package shapes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// Failover experiment parameters.
const (
	failoverRounds = 3                      // failovers per mode (without WAIT, with WAIT)
	replLag        = 300 * time.Millisecond // added to the replication link, each way
	failoverTTL    = 4 * time.Second
)

type roundResult struct {
	mode        string
	fenceA      fencing.Token
	fenceB      fencing.Token
	doubleGrant bool // B was granted while A still believed it held the key
	aOutcome    string
	bAfterKill  time.Duration // from killing the master to B's grant
	aLossAfter  time.Duration // from killing the master to A's loss, ±50ms (0 if kept)
	accepted    int
	rejected    int
	stale       int
	// The sentinels' election, from their logs: how many stood for
	// election, how many elections aborted, when the leader was elected.
	candidates   int
	aborted      int
	electedAfter time.Duration
}

// TestSentinelFailover kills the master of a 1 master + 1 replica + 3
// sentinel deployment while a lease is held and a waiter waits, several
// times with and without Options.WaitReplicas. The replication link runs
// through a fault proxy that adds replLag each way, so the replica lags as
// it would under load; bytes in flight die with the master. It reports
// honestly what happens (locks lost, granted twice, fences duplicated) and
// asserts what must hold whatever happens: the holder learns of the loss,
// and the guarded resource (a fencing.Guard checked by an independent
// history) never accepts a stale write. Only two of the sentinels may stand
// for election (see testserver.SentinelOptions), so the failover never waits
// for a second election after a split vote.
func TestSentinelFailover(t *testing.T) {
	var results []roundResult
	for _, withWait := range []bool{false, true} {
		mode := "without WAIT"
		if withWait {
			mode = "with WAIT 1"
		}
		for i := range failoverRounds {
			t.Run(fmt.Sprintf("%s/%d", strings.ReplaceAll(mode, " ", "_"), i), func(t *testing.T) {
				r := failoverRound(t, withWait)
				r.mode = mode
				results = append(results, r)
			})
		}
	}
	if t.Failed() {
		return
	}
	doubles := map[string]int{}
	dupFences := map[string]int{}
	stale, accepted, rejected := 0, 0, 0
	for _, r := range results {
		if r.doubleGrant {
			doubles[r.mode]++
		}
		if r.fenceA == r.fenceB {
			dupFences[r.mode]++
		}
		stale += r.stale
		accepted += r.accepted
		rejected += r.rejected
	}
	t.Logf("FAILOVER FIGURES (%d failovers per mode, replication lag %v each way, TTL %v):", failoverRounds, replLag, failoverTTL)
	for _, m := range []string{"without WAIT", "with WAIT 1"} {
		t.Logf("  %s: double grants %d/%d, duplicated fences %d/%d", m, doubles[m], failoverRounds, dupFences[m], failoverRounds)
	}
	for _, r := range results {
		t.Logf("  %s: fences A=%d B=%d, double grant %v, A %s (after %v), B granted %v after the kill; sentinels: %d candidates, %d aborted elections, leader elected %v after the kill",
			r.mode, r.fenceA, r.fenceB, r.doubleGrant, r.aOutcome, r.aLossAfter.Round(10*time.Millisecond), r.bAfterKill.Round(10*time.Millisecond),
			r.candidates, r.aborted, r.electedAfter.Round(10*time.Millisecond))
	}
	t.Logf("  guarded writes: %d accepted, %d rejected as stale, stale writes accepted: %d", accepted, rejected, stale)
	if stale != 0 {
		t.Fatalf("%d stale writes accepted", stale)
	}
	if doubles["with WAIT 1"] != 0 {
		t.Errorf("with WAIT, %d double grants: a replica-acknowledged lock was lost in a failover", doubles["with WAIT 1"])
	}
}

func failoverRound(t *testing.T, withWait bool) roundResult {
	var res roundResult
	primary := testserver.StartRedis(t)
	px, err := faultproxy.New(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	_, proxyPort, _ := strings.Cut(px.Addr(), ":")
	replica := testserver.StartRedis(t, testserver.WithConfig("replicaof 127.0.0.1 "+proxyPort))
	for i := 0; ; i++ {
		out, err := replica.CLI(t, "INFO", "replication")
		if err == nil && strings.Contains(out, "master_link_status:up") {
			break
		}
		if i > 200 {
			t.Fatalf("replica never synced: %s %v", out, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	sentinels := testserver.StartSentinels(t, primary, 3, testserver.SentinelOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			for i, s := range sentinels.Nodes {
				t.Logf("sentinel %d log:\n%s", i, s.Log())
			}
			t.Logf("replica log:\n%s", replica.Log())
		}
	})
	sentinels.WaitReady(t, 1)

	var ropts redis.Options
	if withWait {
		ropts = redis.Options{WaitReplicas: 1, WaitTimeout: 3 * time.Second}
	}
	lopts := fencedlock.Options{TTL: failoverTTL, MaxRetryDelay: 100 * time.Millisecond}
	bA := newBackend(t, sentinels.Client(t, primary, nil), ropts)
	bB := newBackend(t, sentinels.Client(t, primary, nil), ropts)
	lA := newLocker(t, bA, lopts)
	lB := newLocker(t, bB, lopts)
	ctx := ctxT(t, 60*time.Second)

	var guard fencing.Guard
	var hist history
	const key = "failover"

	px.SetLatency(replLag)
	lsA, err := lA.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	res.fenceA = lsA.Fence()
	if err := hist.write(&guard, lsA.Fence(), lsA.Holder(), "A1"); err != nil {
		t.Fatalf("A's first write: %v", err)
	}

	type grant struct {
		ls      *fencedlock.Lease
		at      time.Time
		aHeld   bool
		aReason error
		err     error
	}
	bc := make(chan grant, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ls, err := lB.Acquire(bctx, key)
		// Right at B's grant: does A still believe it holds the key?
		aErr := lsA.Err()
		bc <- grant{ls: ls, at: time.Now(), aHeld: aErr == nil, aReason: aErr, err: err}
	}()
	// B is waiting when its subscription reaches the master.
	for i := 0; ; i++ {
		out, err := primary.CLI(t, "PUBSUB", "NUMSUB", bA.Channel(key))
		if f := strings.Fields(out); err == nil && len(f) == 2 && f[1] == "1" {
			break
		}
		if i > 200 {
			t.Fatalf("waiter never subscribed: %q %v", out, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	primary.Kill()
	killAt := time.Now()

	released, replicaAdded := false, false
	var aLostAt time.Time
	var g grant
	deadline := time.After(40 * time.Second)
wait:
	for {
		select {
		case g = <-bc:
			break wait
		case <-deadline:
			t.Fatalf("B not granted 40s after the failover; A: %v", lsA.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if aLostAt.IsZero() && lsA.Err() != nil && !released {
			aLostAt = time.Now()
		}
		// Once the sentinels promoted the replica, give the new master a
		// replica, as an operator would. Without one, WAIT 1 can never be
		// satisfied and every acquire fails with ErrReplication. (A fresh
		// server, not the old master restarted: clients that have not yet
		// switched would find an empty master at the old address.) Without it, WAIT 1 can never
		// be satisfied again and every acquire fails with ErrReplication.
		if addr := sentinels.MasterAddr(t); !replicaAdded && addr != primary.Addr {
			_, port, _ := strings.Cut(addr, ":")
			testserver.StartRedis(t, testserver.WithConfig("replicaof 127.0.0.1 "+port))
			replicaAdded = true
		}
		// A renewed through the new master after the kill: it kept its
		// lease. Hand over properly.
		if !released && lsA.Err() == nil && lsA.Deadline().After(killAt.Add(failoverTTL-failoverTTL/10)) {
			res.aOutcome = "kept the lease through the failover, then released it"
			if err := lsA.Release(ctx); err != nil {
				// Released or lost meanwhile, either way not held.
				res.aOutcome = "kept the lease through the failover; its release found: " + err.Error()
			}
			released = true
		}
	}
	if g.err != nil {
		t.Fatalf("B acquire: %v (sentinels: %d aborted elections)", g.err, len(sentinels.Events("-failover-abort-not-elected")))
	}
	lsB := g.ls
	res.fenceB = lsB.Fence()
	res.bAfterKill = g.at.Sub(killAt)
	res.doubleGrant = g.aHeld && !released
	if aLostAt.IsZero() && !released {
		aLostAt = time.Now()
	}
	if !released {
		res.aLossAfter = aLostAt.Sub(killAt)
	}

	// B writes; then A writes late, as a holder paused past its loss would.
	_ = hist.write(&guard, lsB.Fence(), lsB.Holder(), "B1")
	select {
	case <-lsA.Done():
	case <-time.After(2 * failoverTTL):
		t.Fatalf("A never learned it lost the lease (B holds fence %d)", lsB.Fence())
	}
	if res.aOutcome == "" {
		cause := context.Cause(lsA.Context())
		if !errors.Is(cause, fencedlock.ErrLeaseLost) {
			t.Fatalf("A's lease ended with %v, want ErrLeaseLost", cause)
		}
		res.aOutcome = "lost: " + shortReason(cause)
	}
	_ = hist.write(&guard, lsA.Fence(), lsA.Holder(), "A-late")
	_ = hist.write(&guard, lsB.Fence(), lsB.Holder(), "B2")
	res.accepted, res.rejected = hist.counts()
	res.stale = hist.stale()
	res.candidates = len(sentinels.Events("+try-failover"))
	res.aborted = len(sentinels.Events("-failover-abort-not-elected"))
	if at := sentinels.Events("+elected-leader"); len(at) > 0 {
		res.electedAfter = at[0].Sub(killAt)
	}
	if err := lsB.Release(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("B release: %v", err)
	}
	return res
}

func shortReason(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, driver.ErrNotHeld):
		return "server reported the key gone (renew: not held)"
	case strings.Contains(s, "local deadline"):
		return "local deadline passed without a renewal"
	}
	return s
}
