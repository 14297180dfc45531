package clustertest

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// TestCycleAllocs: the allocations of one uncontended acquire + keepalive
// + release of the backend, over those of the same two Txns made with the
// bare client (the floor: etcd's concurrency.Mutex makes the same two), in
// the whole process (client and in-process servers, measured alternately
// so that both see the same cluster). The surplus is what the backend adds
// per cycle: its call contexts, names, keeper and the deletion watch's event.
// The same under the race detector (surplus 39-40 in 3 runs with -race, as
// without), so it runs in CI.
func TestCycleAllocs(t *testing.T) {
	b, c, _ := childBackend(t)
	ctx := ctxFor(t, time.Minute)
	req := driver.AcquireRequest{Key: "allocs", Owner: "owner-allocs", TTL: 10 * time.Second}
	cycle := func() {
		g, err := b.AcquireWait(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// As a Locker does: keep the lease alive while held, stop the
		// keepalive and wait for its end, then release.
		kctx, cancel := context.WithCancel(ctx)
		kc := b.KeepAlive(kctx, g)
		cancel()
		for r := range kc {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	lg, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	dir := "bare/locks/allocs/"
	name := dir + "0000000000000001"
	bare := func() {
		resp, err := c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", 0)).
			Then(clientv3.OpPut(name, "h", clientv3.WithLease(lg.ID)), clientv3.OpGet(dir, clientv3.WithFirstCreate()...)).
			Commit()
		if err != nil || !resp.Succeeded {
			t.Fatal(resp, err)
		}
		rev := fencing.Token(resp.Header.Revision)
		resp, err = c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", int64(rev))).
			Then(clientv3.OpDelete(name)).
			Commit()
		if err != nil || !resp.Succeeded {
			t.Fatal(resp, err)
		}
	}
	for range 50 { // warm up: the pool, the watch, the streams
		cycle()
		bare()
	}
	var ours, floor []float64
	for range 5 {
		ours = append(ours, testing.AllocsPerRun(100, cycle))
		floor = append(floor, testing.AllocsPerRun(100, bare))
	}
	surplus := median(ours) - median(floor)
	t.Logf("allocations per cycle (client process, median of 5x100): backend %.0f, bare Txns %.0f, surplus %.0f (runs %v / %v)",
		median(ours), median(floor), surplus, ours, floor)
	if surplus > maxCycleSurplus {
		t.Errorf("the backend adds %.0f allocations per acquire+keepalive+release over the bare Txns, want <= %d", surplus, maxCycleSurplus)
	}
}

// maxCycleSurplus: measured 50 before the backend registered its calls under
// its own lock (not context.AfterFunc on closeCtx), built entry names and
// the first-entry read options without extra allocations, and made a
// holder's keeper without a done channel; 39 after.
const maxCycleSurplus = 44

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
