package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/electiontest"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// setup runs the scenarios of internal/electiontest on backend/memory:
// Elections on backends of one Store, and its FencedStore.
func setup() electiontest.Setup {
	s := memory.NewStore()
	return electiontest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *election.Election {
			return locktest.Open(t, s.Backend(), opts, election.New)
		},
		Store: memory.NewFencedStore(),
		TTL:   200 * time.Millisecond,
	}
}

func TestResignedLeaderWriteRefused(t *testing.T) {
	electiontest.ResignedLeaderWriteRefused(t, setup())
}

func TestPausedLeaderWriteRefused(t *testing.T) {
	electiontest.PausedLeaderWriteRefused(t, setup())
}

func TestResignRacesExpiry(t *testing.T) { electiontest.ResignRacesExpiry(t, setup(), 10) }

func TestCancelledCampaignLeavesNothing(t *testing.T) {
	electiontest.CancelledCampaignLeavesNothing(t, setup())
}

func TestObserveUnderChurn(t *testing.T) { electiontest.ObserveUnderChurn(t, setup(), 3, 10) }

// TestNewRefusesNonElector: a backend without driver.Elector is refused
// with errors.ErrUnsupported.
func TestNewRefusesNonElector(t *testing.T) {
	b := struct{ driver.Backend }{memory.New()} // hides every optional interface
	defer b.Close()
	if _, err := election.New(b, fencedlock.Options{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New on a backend without Elector = %v, want ErrUnsupported", err)
	}
}

// scripted is a backend/memory Backend whose WatchLeader delivers evs.
type scripted struct {
	*memory.Backend
	evs []driver.LeaderEvent
}

func (s scripted) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	ch := make(chan driver.LeaderEvent, len(s.evs))
	for _, ev := range s.evs {
		ch <- ev
	}
	close(ch)
	return ch, func() {}, nil
}

// TestObserveNeverRevivesAnEndedTerm: a backend that reports a term again
// after reporting its end (Redis after a failover that lost the release:
// the lock key is back with the old owner) must not make Observe deliver
// that term as the leader again: it ended, and a term never begins twice.
// Observe drops it and says Missed on the next event.
func TestObserveNeverRevivesAnEndedTerm(t *testing.T) {
	term := func(f fencing.Token) driver.LeaderEvent {
		return driver.LeaderEvent{LeaderInfo: driver.LeaderInfo{Held: true, Fence: f, Holder: "h", Value: []byte("v")}}
	}
	b := scripted{Backend: memory.New(), evs: []driver.LeaderEvent{{}, term(5), {}, term(5), {}, term(6)}}
	e := locktest.Open(t, b, fencedlock.Options{}, election.New)
	evs, err := e.Observe(t.Context(), "revived")
	if err != nil {
		t.Fatal(err)
	}
	var got []election.Event
	for ev := range evs {
		got = append(got, ev)
	}
	want := "[none 5 v none none (missed) 6 v]"
	if d := fmt.Sprint(electiontest.Describe(got)); d != want {
		t.Fatalf("Observe delivered %v, want %v", d, want)
	}
}

// slowProclaim is a backend/memory Backend whose Proclaim first deletes
// the lock behind its holder's back, then waits for its context: the
// term's lease is lost while its value is being stored.
type slowProclaim struct {
	*memory.Backend
	s *memory.Store
}

func (b slowProclaim) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	b.s.Invalidate(key)
	<-ctx.Done()
	return ctx.Err()
}

// TestCampaignLeaseLostWhileProclaiming: a Campaign whose lease is lost
// before its value was stored fails with the loss (ErrLeaseLost), not
// with context.Canceled: the caller's context is live, and a caller that
// stops campaigning on its own cancellation must not take this for it.
func TestCampaignLeaseLostWhileProclaiming(t *testing.T) {
	s := memory.NewStore()
	b := slowProclaim{Backend: s.Backend(), s: s}
	e := locktest.Open(t, b, fencedlock.Options{TTL: 300 * time.Millisecond}, election.New)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := e.Campaign(ctx, "lost", []byte("v"))
	if ctx.Err() != nil {
		t.Fatalf("Campaign returned %v only once its context ended", err)
	}
	if err == nil || errors.Is(err, context.Canceled) || !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Fatalf("Campaign whose lease was lost while proclaiming = %v, want ErrLeaseLost and not context.Canceled", err)
	}
}

// lostBeforeProclaim is an Elector whose lock key is deleted behind the
// holder's back (drop: evicted, deleted by hand, lost in a failover)
// between a Campaign's grant and its Proclaim.
type lostBeforeProclaim struct {
	driver.Backend
	el   driver.Elector
	drop func(t *testing.T, key string)
	t    *testing.T
}

func (b lostBeforeProclaim) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	b.drop(b.t, key)
	return b.el.Proclaim(ctx, key, fence, holder, value)
}

func (b lostBeforeProclaim) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	return b.el.Leader(ctx, key)
}

func (b lostBeforeProclaim) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	return b.el.WatchLeader(ctx, key)
}

// campaignLostBeforeProclaim runs a Campaign on b whose lock key drop
// deletes before its value is stored: the backend refuses the Proclaim
// (ErrNotHeld), and Campaign reports the loss, ErrLeaseLost, as it does
// when the watchdog sees it first (TestCampaignLeaseLostWhileProclaiming),
// leaving no leader.
func campaignLostBeforeProclaim(t *testing.T, b driver.Backend, drop func(t *testing.T, key string)) {
	lb := lostBeforeProclaim{Backend: b, el: b.(driver.Elector), drop: drop, t: t}
	e := locktest.Open(t, lb, fencedlock.Options{TTL: 10 * time.Second}, election.New)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	term, err := e.Campaign(ctx, "dropped", []byte("v"))
	if term != nil || !errors.Is(err, fencedlock.ErrLeaseLost) || errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign whose lock key was deleted before its Proclaim = %v, %v; want no term, ErrLeaseLost", term, err)
	}
	if l, err := e.Leader(ctx, "dropped"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader = %+v, %v; want ErrNoLeader", l, err)
	}
}

// TestCampaignLostBeforeProclaim: on backend/memory (Store.Invalidate).
func TestCampaignLostBeforeProclaim(t *testing.T) {
	s := memory.NewStore()
	b := s.Backend()
	t.Cleanup(func() { b.Close() })
	campaignLostBeforeProclaim(t, b, func(_ *testing.T, key string) { s.Invalidate(key) })
}
