package shapes_test

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

// rwPerms are the commands docs/redis-acl.md adds for read-write locks
// (its "Read-write locks" row), on top of aclPerms.
var rwPerms = []string{"+time", "+zadd", "+zrange", "+zrangebyscore", "+zremrangebyscore", "+zscore", "+zcard", "+zrem", "+zcount", "+hget", "+hset", "+hdel"}

// TestTLSAndACLRWLock: the read-write lock's operations, InspectRW
// included (fencedlock inspect and list use it), run as a user with only
// the permissions docs/redis-acl.md lists, over TLS, and the server
// records no denial. (rwinspect.lua's ZCOUNT was missing from the list:
// InspectRW failed with "The user executing the script can't run this
// command or subcommand".)
func TestTLSAndACLRWLock(t *testing.T) {
	srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", append(aclPerms[:len(aclPerms):len(aclPerms)], rwPerms...)))
	b := newBackend(t, c, redis.Options{})
	ctx := ctxT(t, 20*time.Second)
	req := func(owner string, m driver.RWMode) driver.RWRequest {
		r := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: "cfg", Owner: owner, TTL: time.Minute}, Mode: m}
		if m == driver.Write {
			r.Intent = time.Minute
		}
		return r
	}
	r1, err := b.AcquireRW(ctx, req("reader-1", driver.Read))
	if err != nil {
		t.Fatalf("read acquire: %v", err)
	}
	if _, err := b.AcquireRW(ctx, req("writer", driver.Write)); err == nil {
		t.Fatal("write acquire while a reader holds: granted")
	}
	info, err := b.InspectRW(ctx, "cfg")
	if err != nil {
		t.Fatalf("InspectRW: %v", err)
	}
	if len(info.Readers) != 1 || info.Intents != 1 {
		t.Fatalf("InspectRW = %+v, want one reader, one intent", info)
	}
	if _, err := b.RenewRW(ctx, r1, driver.Read, time.Minute); err != nil {
		t.Fatalf("RenewRW: %v", err)
	}
	if err := b.ReleaseRW(ctx, r1, driver.Read); err != nil {
		t.Fatalf("ReleaseRW: %v", err)
	}
	w, err := b.AcquireRW(ctx, req("writer", driver.Write))
	if err != nil {
		t.Fatalf("write acquire once the reader left: %v", err)
	}
	if w.Fence <= r1.Fence {
		t.Fatalf("writer's fence %d, not above the reader's %d", w.Fence, r1.Fence)
	}
	if err := b.ReleaseRW(ctx, w, driver.Write); err != nil {
		t.Fatalf("ReleaseRW of the writer: %v", err)
	}
	if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
		t.Fatalf("ACL LOG records denials:\n%s", out)
	}
}
