package election_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
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
