package shapes_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/redis/rueidis"
)

// aclFairPerms are what docs/redis-acl.md adds for redis.NewFair: the list
// commands of the fair queue, TIME (entry expiry) and MGET (wait.lua reads
// the lock and its counter at once), called inside the scripts.
var aclFairPerms = []string{"+lpop", "+lpush", "+rpush", "+lrange", "+lset", "+lrem", "+time", "+mget"}

// TestTLSAndACLFair: FairBackend waiters queue and are handed the lock,
// over TLS, as a user with the rule of docs/redis-acl.md plus its fair
// queue row, and ACL LOG records no denial. The plain rule still works
// for releases as long as nobody queues (TestTLSAndACL).
func TestTLSAndACLFair(t *testing.T) {
	srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", append(append([]string{}, aclPerms...), aclFairPerms...)))
	c2 := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "fencedlock", "lock-pw" })
	b := newBackend(t, c, redis.Options{})
	f, err := redis.NewFair(c2, redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	l, l2 := newLocker(t, b, fencedlock.Options{TTL: 30 * time.Second}), newLocker(t, f, fencedlock.Options{TTL: 30 * time.Second})
	ctx := ctxT(t, 20*time.Second)
	ls, err := l.TryAcquire(ctx, "fair")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := l2.Acquire(ctx, "fair") // queued, handed the lock by the release
		if err == nil {
			if wl.Fence() != ls.Fence()+1 {
				t.Errorf("waiter fence %d, want %d", wl.Fence(), ls.Fence()+1)
			}
			err = wl.Release(ctx)
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if strings.TrimSpace(cliOK(t, srv, "LLEN", b.LockKey("fair")+":queue")) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the FairBackend waiter did not queue within 10s")
		}
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
		t.Fatalf("ACL LOG records denials:\n%s", out)
	}
}

// TestTLSAndACLRefusedCounter: the scripts increment the fence counter
// before checking it, and undo the increment when they refuse it; the
// undo must need no permission beyond docs/redis-acl.md's rule (a DECR
// refused by the ACL would abort the script with the lock taken and the
// counter changed). A negative counter and one with a TTL are refused with
// ErrCorrupt as that user, and left exactly as they were.
func TestTLSAndACLRefusedCounter(t *testing.T) {
	srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", aclPerms))
	b := newBackend(t, c, redis.Options{})
	l := newLocker(t, b, fencedlock.Options{TTL: 30 * time.Second})
	ctx := ctxT(t, 20*time.Second)
	for _, tc := range []struct{ key, val, ttl string }{{"neg", "-5", ""}, {"ttl", "12", "600000"}} {
		fk := b.FenceKey(tc.key)
		cliOK(t, srv, "SET", fk, tc.val)
		if tc.ttl != "" {
			cliOK(t, srv, "PEXPIRE", fk, tc.ttl)
		}
		if _, err := l.TryAcquire(ctx, tc.key); !errors.Is(err, redis.ErrCorrupt) {
			t.Fatalf("%s: acquire %v, want ErrCorrupt", tc.key, err)
		}
		if got := strings.TrimSpace(cliOK(t, srv, "GET", fk)); got != tc.val {
			t.Fatalf("%s: counter %q after the refusal, want %q", tc.key, got, tc.val)
		}
		if got := strings.TrimSpace(cliOK(t, srv, "EXISTS", b.LockKey(tc.key))); got != "0" {
			t.Fatalf("%s: lock left behind", tc.key)
		}
	}
	if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
		t.Fatalf("ACL LOG records denials:\n%s", out)
	}
}
