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
