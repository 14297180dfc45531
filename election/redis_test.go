package election_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
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

// TestRedisRestartedCounterReportsNoStaleLeader: a fence counter that
// starts again (retired with RetireFence once the name was unused, or set
// back by hand) gives a later lease the fence of an ended term whose
// leader record is still there. Until that lease's Campaign stores its
// value, Leader and Observe report no leader: never the ended term's
// value and holder as the new lease's; once it stores its value, that
// value. Both clients.
func TestRedisRestartedCounterReportsNoStaleLeader(t *testing.T) {
	restarts := []struct {
		name    string
		restart func(t *testing.T, srv *testserver.Redis, b driver.Backend, key string)
	}{
		{"retired", func(t *testing.T, _ *testserver.Redis, b driver.Backend, key string) {
			if _, err := b.(interface {
				RetireFence(context.Context, string) (fencing.Token, error)
			}).RetireFence(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		}},
		{"set back by hand", func(t *testing.T, srv *testserver.Redis, b driver.Backend, key string) {
			fk := b.(interface{ FenceKey(string) string }).FenceKey(key)
			if out, err := srv.CLI(t, "DECR", fk); err != nil {
				t.Fatal(out, err)
			}
		}},
	}
	for _, cl := range backendtest.RedisClients {
		for _, rs := range restarts {
			t.Run(cl.Name+"/"+rs.name, func(t *testing.T) {
				srv := testserver.StartRedis(t)
				b, _ := cl.Open(t, srv)
				t.Cleanup(func() { b.Close() })
				e := locktest.Open(t, b, fencedlock.Options{TTL: 10 * time.Second}, election.New)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				const key = "restarted"
				old, err := e.Campaign(ctx, key, []byte("old"))
				if err != nil {
					t.Fatal(err)
				}
				if err := old.Resign(ctx); err != nil {
					t.Fatal(err)
				}
				rs.restart(t, srv, b, key)
				events, err := e.Observe(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				// A lease granted, its value not stored yet (a Campaign
				// between its grant and its Proclaim), with the ended
				// term's fence.
				g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: "the-new-lease-" + rand.Text(), TTL: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if g.Fence != old.Fence() {
					t.Fatalf("the new lease has fence %v, want the ended term's %v (the counter started again)", g.Fence, old.Fence())
				}
				if l, err := e.Leader(ctx, key); !errors.Is(err, election.ErrNoLeader) {
					t.Errorf("a lease granted, its value not stored: Leader = %+v, %v; want ErrNoLeader, not the ended term's value and holder %s (the lease's holder is %s)",
						l, err, old.Holder(), driver.HolderID(g.Owner))
				}
				// The watch reads the state at a wake-up: one by hand, and
				// time to read before the new lease's Proclaim wakes it.
				if out, err := srv.CLI(t, "PUBLISH", b.(interface{ Channel(string) string }).Channel(key), "by hand"); err != nil {
					t.Fatal(out, err)
				}
				time.Sleep(300 * time.Millisecond)
				el := b.(driver.Elector)
				if err := el.Proclaim(ctx, key, g.Fence, driver.HolderID(g.Owner), []byte("new")); err != nil {
					t.Fatal(err)
				}
				for ev := range events {
					if ev.Held && string(ev.Value) != "new" {
						t.Fatalf("Observe delivered %+v: the ended term's value for the new lease", ev)
					}
					if ev.Held {
						break
					}
				}
				if l, err := e.Leader(ctx, key); err != nil || string(l.Value) != "new" || l.Holder != driver.HolderID(g.Owner) {
					t.Fatalf("after the new lease's Proclaim: Leader = %+v, %v; want its value and holder %s", l, err, driver.HolderID(g.Owner))
				}
			})
		}
	}
}

// TestRedisCampaignLostBeforeProclaim: campaignLostBeforeProclaim on a
// real redis-server with each client, the lock key deleted by hand.
func TestRedisCampaignLostBeforeProclaim(t *testing.T) {
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b, _ := cl.Open(t, srv)
			t.Cleanup(func() { b.Close() })
			campaignLostBeforeProclaim(t, b, func(t *testing.T, key string) {
				if out, err := srv.CLI(t, "DEL", b.(interface{ LockKey(string) string }).LockKey(key)); err != nil || strings.TrimSpace(out) != "1" {
					t.Errorf("DEL of the lock key: %q, %v", out, err)
				}
			})
		})
	}
}
