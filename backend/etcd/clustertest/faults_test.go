package clustertest

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The leader is stopped while a lease is held through a follower, and
// restarted: the lease survives, and fences granted before, during and
// after the leader change keep increasing.
func TestLeaderStopRestartWhileHeld(t *testing.T) {
	e := newEnv(t)
	lead, fol := e.leader()
	const hold = 3 * time.Second
	hl, _ := e.locker(fol[0], fencedlock.Options{TTL: hold})
	ol, _ := e.locker(fol[1], fencedlock.Options{TTL: hold})
	ctx := ctxFor(t, time.Minute)

	h, err := hl.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	before := h.Fence()

	e.clus.Members[lead].Stop(t)
	stopped := time.Now()
	others := e.clus.Members[:0:0]
	for _, i := range fol {
		others = append(others, e.clus.Members[i])
	}
	newLead := fol[e.clus.WaitMembersForLeader(t, others)]
	elected := time.Since(stopped)

	during, err := ol.Acquire(ctx, "other")
	if err != nil {
		t.Fatalf("acquire while the old leader is down: %v", err)
	}
	// Hold through more than two TTLs of the leader change.
	select {
	case <-h.Done():
		t.Fatalf("lease lost across the leader change: %v", h.Err())
	case <-time.After(2 * hold):
	}

	if err := e.clus.Members[lead].Restart(t); err != nil {
		t.Fatal(err)
	}
	e.clus.WaitLeader(t)
	if h.Err() != nil {
		t.Fatalf("lease lost after the old leader restarted: %v", h.Err())
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := during.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rl, _ := e.locker(lead, fencedlock.Options{TTL: hold})
	after, err := rl.Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer after.Release(ctx)
	if !(before < during.Fence() && during.Fence() < after.Fence()) {
		t.Fatalf("fences across the leader change not increasing: before %d, during %d, after %d", before, during.Fence(), after.Fence())
	}
	t.Logf("leader member %d stopped; member %d elected after %s; lease on \"orders\" held throughout (%v)", lead, newLead, ms(elected), 2*hold)
	t.Logf("fences: before the stop %d (orders), while the old leader was down %d (other), after its restart %d (orders, from the restarted member)", before, during.Fence(), after.Fence())
}

// lossRace runs the common part of the blackhole and partition tests: H
// holds "k" through member hm, W waits through member wm; fault() cuts H
// off. H must learn it lost the lease before W is granted, and W's fence
// must be greater. It returns H's loss delay and W's grant delay, both
// measured from the fault.
func lossRace(t *testing.T, e *env, hm, wm int, fault, heal func()) (lost, granted time.Duration) {
	t.Helper()
	hl, hb := e.locker(hm, fencedlock.Options{})
	wl, wb := e.locker(wm, fencedlock.Options{})
	ctx := ctxFor(t, time.Minute)
	h, err := hl.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.FencedPut(ctx, "app/k", "from H", h.Fence(), h.Holder()); err != nil {
		t.Fatal(err)
	}
	wch := acquireAsync(ctx, wl, "k")
	e.waitEntries("k", 2)

	start := time.Now()
	fault()
	var tLost time.Time
	select {
	case <-h.Done():
		tLost = time.Now()
	case <-time.After(ttl + ttl/3):
		t.Fatalf("H's loss not reported within TTL + one renew interval (%v)", ttl+ttl/3)
	}
	if !errors.Is(h.Err(), fencedlock.ErrLeaseLost) {
		t.Fatalf("H.Err = %v", h.Err())
	}
	w := recv(t, wch, 10*time.Second, "W after H's loss")
	if !tLost.Before(w.at) {
		t.Fatalf("H learned of its loss %s after W was granted", ms(tLost.Sub(w.at)))
	}
	if w.lease.Fence() <= h.Fence() {
		t.Fatalf("W's fence %d not above H's %d", w.lease.Fence(), h.Fence())
	}
	if err := wb.FencedPut(ctx, "app/k", "from W", w.lease.Fence(), w.lease.Holder()); err != nil {
		t.Fatal(err)
	}
	heal()
	// H comes back: its late write is rejected, its late release deletes
	// nothing, and W still holds the lock.
	// (H's client may need a moment to reconnect: retry transport errors,
	// as an application would.)
	var se *fencing.StaleError
	for attempt := 0; ; attempt++ {
		err := hb.FencedPut(ctx, "app/k", "late from H", h.Fence(), h.Holder())
		if errors.As(err, &se) {
			break
		}
		if err == nil || attempt == 50 {
			t.Fatalf("H's late write: %v, want StaleError", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := h.Release(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("H's late release: %v, want ErrNotHeld", err)
	}
	if info, err := wb.Inspect(ctx, "k"); err != nil || info.Fence != w.lease.Fence() {
		t.Fatalf("after H's late release: %+v, %v; W (fence %d) must still hold", info, err, w.lease.Fence())
	}
	if w.lease.Err() != nil {
		t.Fatalf("W lost its lease: %v", w.lease.Err())
	}
	w.lease.Release(ctx)
	t.Logf("H fence %d, W fence %d; H's loss reported %s after the fault (%v); W granted %s after the fault; H knew %s before W got the lock",
		h.Fence(), w.lease.Fence(), ms(tLost.Sub(start)), h.Err(), ms(w.at.Sub(start)), ms(w.at.Sub(tLost)))
	return tLost.Sub(start), w.at.Sub(start)
}

// The holder's member is blackholed at its client bridge: the holder's
// keepalives vanish, its lease expires on the server and the waiter on
// another member is granted the lock, but only after the holder learned
// (from its local deadline) that it lost it.
func TestBlackholedHolderLearnsFirst(t *testing.T) {
	e := newEnv(t)
	_, fol := e.leader()
	bridge := e.clus.Members[fol[0]].Bridge()
	heal := healer(t, bridge)
	lost, granted := lossRace(t, e, fol[0], fol[1], bridge.Blackhole, heal)
	t.Logf("blackhole (TTL %v, renew every %v): loss-detection delay %s, other client granted at %s", ttl, ttl/3, ms(lost), ms(granted))
}

// A follower is partitioned from its peers: the holder connected to it can
// still reach it, but its keepalives cannot reach the leader. Same
// guarantees as the blackhole.
func TestPartitionedHolderMember(t *testing.T) {
	e := newEnv(t)
	_, fol := e.leader()
	m := e.clus.Members[fol[0]]
	others := e.clus.Members[:0:0]
	for i, o := range e.clus.Members {
		if i != fol[0] {
			others = append(others, o)
		}
	}
	healed := false
	heal := func() {
		if !healed {
			m.RecoverPartition(t, others...)
			healed = true
			e.clus.WaitLeader(t)
		}
	}
	t.Cleanup(heal)
	lost, granted := lossRace(t, e, fol[0], fol[1], func() { m.InjectPartition(t, others...) }, heal)
	t.Logf("partition (TTL %v): loss-detection delay %s, other client granted at %s", ttl, ms(lost), ms(granted))
}

// The Jepsen scenario of etcd issue #11456 with a real expiry: W waits
// behind H through a member whose client bridge is then blackholed, so W's
// keepalives stop and its lease expires on the server while W still
// waits. H releases; C (queued after W) must be granted. When the
// blackhole heals, W sees its predecessor gone but also its own entry gone:
// it must not take the lock, and re-queues behind C with a new fence.
func TestWaiterPausedPastItsLease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t, time.Minute)
	bridge := e.clus.Members[1].Bridge()
	heal := healer(t, bridge)

	h, wch, cch, kvs := e.queuedBehind(ctx, "jepsen")
	dead := kvs[1]

	bridge.Blackhole()
	paused := time.Now()
	e.waitEntries("jepsen", 2) // W's lease expired on the server
	expired := time.Since(paused)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := recv(t, cch, 10*time.Second, "C after H released")
	heal()

	time.Sleep(ttl / 2) // W wakes up, finds its entry gone, re-queues
	select {
	case a := <-wch:
		t.Fatalf("W acquired while C held the lock (fence %v, err %v)", a.lease, a.err)
	default:
	}
	if c.lease.Err() != nil {
		t.Fatalf("C lost its lease: %v", c.lease.Err())
	}
	if err := c.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := recv(t, wch, 10*time.Second, "W after C")
	if w.lease.Fence() <= c.lease.Fence() || w.lease.Fence() == fencing.Token(dead.CreateRevision) {
		t.Fatalf("W's fence %d: want a new entry above C's %d (its expired entry was %d)", w.lease.Fence(), c.lease.Fence(), dead.CreateRevision)
	}
	w.lease.Release(ctx)
	t.Logf("W's entry %d expired %s after its member was blackholed; C granted %d; W re-queued after healing and granted %d",
		dead.CreateRevision, ms(expired), c.lease.Fence(), w.lease.Fence())
}
