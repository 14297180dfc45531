package shapes_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// TestTLSAndACLElection: elections need +hset +hmget beyond the lock's
// rule (docs/redis-acl.md): with them a term is proclaimed, read and
// watched over TLS with no denial in ACL LOG; without +hset a Proclaim
// fails with a permanent error and stores nothing.
func TestTLSAndACLElection(t *testing.T) {
	perms := append(append([]string(nil), aclPerms...), "+hset", "+hmget")
	t.Run("least privilege works", func(t *testing.T) {
		srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", perms))
		b := newBackend(t, c, redis.Options{})
		ctx := ctxT(t, 20*time.Second)
		events, stop, err := b.WatchLeader(ctx, "elect")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if ev := <-events; ev.Held {
			t.Fatalf("first event %+v, want no leader", ev)
		}
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "elect", Owner: "acl-owner", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Proclaim(ctx, "elect", g.Fence, driver.HolderID(g.Owner), []byte("a")); err != nil {
			t.Fatal(err)
		}
		if ev := <-events; !ev.Held || ev.Fence != g.Fence || string(ev.Value) != "a" {
			t.Fatalf("event after Proclaim %+v, want the term of fence %v", ev, g.Fence)
		}
		if info, err := b.Leader(ctx, "elect"); err != nil || !info.Held || info.Fence != g.Fence {
			t.Fatalf("Leader = %+v, %v", info, err)
		}
		if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
			t.Fatalf("ACL LOG records denials:\n%s", out)
		}
	})
	t.Run("no HSET", func(t *testing.T) {
		srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", without(perms, "+hset")))
		b := newBackend(t, c, redis.Options{})
		ctx := ctxT(t, 20*time.Second)
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "elect", Owner: "acl-owner", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		err = b.Proclaim(ctx, "elect", g.Fence, driver.HolderID(g.Owner), []byte("a"))
		if !errors.Is(err, fencedlock.ErrPermanent) {
			t.Fatalf("Proclaim without +hset: %v, want ErrPermanent", err)
		}
		if out := cliOK(t, srv, "EXISTS", b.LockKey("elect")+":leader"); out != "0" {
			t.Fatalf("EXISTS of the leader record after a denied Proclaim: %q, want 0", out)
		}
	})
}
