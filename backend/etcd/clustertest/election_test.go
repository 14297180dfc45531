package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/electiontest"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// electionSetup runs the scenarios of internal/electiontest on the etcd
// backend: each Election on its own client of the next member, the fenced
// store on member 0, the queue entries counted by the operator's client.
func (e *env) electionSetup() electiontest.Setup {
	return electiontest.Setup{
		New:    opener(e, 1, election.New),
		Store:  etcd.NewFencedStore(e.backend(0)),
		TTL:    ttl,
		Queued: func(_ *testing.T, name string) int { return len(e.entries(name)) },
	}
}

func TestElectionResignedLeaderWriteRefused(t *testing.T) {
	electiontest.ResignedLeaderWriteRefused(t, newEnv(t).electionSetup())
}

func TestElectionPausedLeaderWriteRefused(t *testing.T) {
	electiontest.PausedLeaderWriteRefused(t, newEnv(t).electionSetup())
}

func TestElectionResignRacesExpiry(t *testing.T) {
	electiontest.ResignRacesExpiry(t, newEnv(t).electionSetup(), 3)
}

func TestElectionCancelledCampaignLeavesNothing(t *testing.T) {
	electiontest.CancelledCampaignLeavesNothing(t, newEnv(t).electionSetup())
}

func TestElectionObserveUnderChurn(t *testing.T) {
	electiontest.ObserveUnderChurn(t, newEnv(t).electionSetup(), 3, 5)
}

// opener returns a Setup's New for mk (election.New, semaphore.New): each
// call opens one on a backend with its own client of the next member,
// from member first on, with the tests' TTL unless opts has one.
func opener[T interface{ Close() error }](e *env, first int, mk func(driver.Backend, fencedlock.Options) (T, error)) func(*testing.T, fencedlock.Options) T {
	n := first
	return func(t *testing.T, opts fencedlock.Options) T {
		b := e.backend(n % len(e.clus.Members))
		n++
		if opts.TTL == 0 {
			opts.TTL = ttl
		}
		return locktest.Open(t, b, opts, mk)
	}
}

// TestElectionObserveMissedAfterCompaction: an observer whose connection
// is cut while three terms begin and end, and whose history is compacted
// before it reconnects, cannot be told those terms: its next event is
// the current state marked Missed, and it goes on with the next term in
// order.
func TestElectionObserveMissedAfterCompaction(t *testing.T) {
	e := newEnv(t)
	lead, fol := e.leader()
	ctx := ctxFor(t, time.Minute)
	obs := locktest.Open(t, e.backend(fol[0]), fencedlock.Options{TTL: ttl}, election.New)
	el := locktest.Open(t, e.backend(lead), fencedlock.Options{TTL: ttl}, election.New)
	events, err := obs.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Held || ev.Missed {
		t.Fatalf("first event %+v, want no leader", ev)
	}
	bridge := e.clus.Members[fol[0]].Bridge()
	bridge.PauseConnections()
	bridge.DropConnections()
	t.Cleanup(bridge.UnpauseConnections)
	var lastFence fencing.Token
	for i := range 3 {
		term, err := el.Campaign(ctx, "svc", []byte(fmt.Sprint("while down ", i)))
		if err != nil {
			t.Fatal(err)
		}
		lastFence = term.Fence()
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := e.client(lead)
	resp, err := c.Get(ctx, "compaction-point")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	bridge.UnpauseConnections()
	var got []election.Event
	for ev := range events { // closed when ctx ends
		got = append(got, ev)
		if ev.Missed {
			break
		}
		if ev.Held && ev.Fence >= lastFence {
			t.Fatalf("the terms led while the member was down were delivered after compaction, without Missed: %v", electiontest.Describe(got))
		}
	}
	if len(got) == 0 || !got[len(got)-1].Missed || got[len(got)-1].Held {
		t.Fatalf("after compaction: %v, want the current state (no leader) marked Missed", electiontest.Describe(got))
	}
	term, err := el.Campaign(ctx, "svc", []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if ev := <-events; !ev.Held || ev.Fence != term.Fence() || string(ev.Value) != "after" {
		t.Fatalf("after the Missed event: %v, want the term of fence %v", electiontest.Describe([]election.Event{ev}), term.Fence())
	}
	t.Logf("observed after reconnecting: %v", electiontest.Describe(got))
}

// noPrevKV is a Watcher whose deletion events carry no previous key, as
// etcd sends them when the previous revision was compacted before the
// event was sent (the server's prevKV lookup fails silently).
type noPrevKV struct{ clientv3.Watcher }

func (w noPrevKV) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					ev.PrevKv = nil
				}
			}
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// TestElectionObserveDeletionWithoutPrevKV: a term's end whose deletion
// event comes without its previous key (compacted meanwhile) cannot be
// matched to a term; the observer must not keep reporting the term as
// the leader: it reads the state again and delivers it (Missed).
func TestElectionObserveDeletionWithoutPrevKV(t *testing.T) {
	e := newEnv(t)
	ctx := ctxFor(t, time.Minute)
	c := e.client(1)
	c.Watcher = noPrevKV{c.Watcher}
	ob, err := etcd.New(c, etcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	obs := locktest.Open(t, ob, fencedlock.Options{TTL: ttl}, election.New)
	el := locktest.Open(t, e.backend(0), fencedlock.Options{TTL: ttl}, election.New)
	events, err := obs.Observe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Held {
		t.Fatalf("first event %+v, want no leader", ev)
	}
	term, err := el.Campaign(ctx, "svc", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; !ev.Held || ev.Fence != term.Fence() {
		t.Fatalf("event %+v, want the term of fence %v", ev, term.Fence())
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case ev := <-events:
		if ev.Held {
			t.Fatalf("event %+v after the only term resigned, want no leader", ev)
		}
	case <-wait.C:
		t.Fatalf("no event within 5s of the term's end (its deletion came without the previous key): the observer still reports the term of fence %v", term.Fence())
	}
}
