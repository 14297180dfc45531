package rediscore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/backendtest"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestCleanupOverMaxmemory: the clean-up release of a key (Grant{Key,
// Owner}, the Locker's after an acquire whose reply was lost) on a server
// over maxmemory (noeviction) frees the key and records the owner, as the
// set's does (TestMultiCleanupOverMaxmemory): release.lua recorded the
// owner with SADD before its DEL, and a server over maxmemory refuses a
// command that may grow memory as a script's first write, so the whole
// clean-up failed with OOM and the key stayed held by nobody for its TTL.
// The owner's acquire, arriving after the clean-up, takes nothing.
func TestCleanupOverMaxmemory(t *testing.T) {
	for _, cl := range backendtest.RedisClients {
		t.Run(cl.Name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			b := open(t, cl, srv)
			ctx := context.Background()
			req := driver.AcquireRequest{Key: "oom", Owner: rand.Text(), TTL: time.Minute}
			if _, err := b.Acquire(ctx, req); err != nil { // its reply "lost"
				t.Fatal(err)
			}
			cli(t, srv, "CONFIG", "SET", "maxmemory", "1")
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "other", Owner: rand.Text(), TTL: time.Minute}); err == nil {
				t.Fatal("Acquire over maxmemory succeeded: the server is not over maxmemory")
			}
			if err := b.Release(ctx, driver.Grant{Key: req.Key, Owner: req.Owner}); err != nil {
				t.Errorf("clean-up release over maxmemory: %v, want nil", err)
			}
			if out := cli(t, srv, "EXISTS", lockKey(req.Key)); out != "0" {
				t.Errorf("%q after the clean-up: EXISTS %s, want freed", req.Key, out)
			}
			cli(t, srv, "CONFIG", "SET", "maxmemory", "0")
			if g, err := b.Acquire(ctx, req); err == nil {
				t.Errorf("the owner's acquire after its clean-up: granted fence %d, want refused (the owner was cleaned up)", g.Fence)
			}
			if out := cli(t, srv, "EXISTS", lockKey(req.Key)); out != "0" {
				t.Errorf("%q after the cleaned-up owner's acquire: EXISTS %s, want free", req.Key, out)
			}
		})
	}
}
