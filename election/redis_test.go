package election_test

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/electiontest"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestRedis runs the scenarios of internal/electiontest on a real
// redis-server with each client: every Election on a Backend of its own,
// the term's lease counted by Inspect (a Redis lock has no server-side
// waiters but those of a FairBackend).
func TestRedis(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, electiontest.Setup)
	}{
		{"ResignedLeaderWriteRefused", electiontest.ResignedLeaderWriteRefused},
		{"PausedLeaderWriteRefused", electiontest.PausedLeaderWriteRefused},
		{"ResignRacesExpiry", func(t *testing.T, s electiontest.Setup) { electiontest.ResignRacesExpiry(t, s, 3) }},
		{"CancelledCampaignLeavesNothing", electiontest.CancelledCampaignLeavesNothing},
		{"ObserveUnderChurn", func(t *testing.T, s electiontest.Setup) { electiontest.ObserveUnderChurn(t, s, 3, 5) }},
	}
	for _, cl := range backendtest.RedisClients {
		for _, sc := range scenarios {
			t.Run(cl.Name+"/"+sc.name, func(t *testing.T) {
				sc.run(t, redisSetup(t, cl.Open))
			})
		}
	}
}

// redisSetup is the Setup of the scenarios on a new server, with Backends
// made by open.
func redisSetup(t *testing.T, open func(*testing.T, *testserver.Redis) (driver.Backend, fencing.Store)) electiontest.Setup {
	const ttl = time.Second
	srv := testserver.StartRedis(t)
	inspector, store := open(t, srv)
	t.Cleanup(func() { inspector.Close() })
	return electiontest.Setup{
		New: func(t *testing.T, opts fencedlock.Options) *election.Election {
			if opts.TTL == 0 {
				opts.TTL = ttl
			}
			b, _ := open(t, srv)
			return locktest.Open(t, b, opts, election.New)
		},
		Store: store,
		TTL:   ttl,
		Queued: func(t *testing.T, name string) int {
			info, err := inspector.(driver.Inspector).Inspect(t.Context(), name)
			if err != nil {
				t.Fatal(err)
			}
			if info.Held {
				return 1
			}
			return 0
		},
	}
}
