package shapes_test

// TLS with an ACL user holding only the rule of docs/redis-acl.md: the
// Backend, its queue of waiters, and a refused
// fence counter's undo, which must need no permission beyond the rule.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// aclPerms is the least-privilege ACL rule of docs/redis-acl.md for the
// default options (standalone or Sentinel, classic Pub/Sub, no WAIT), minus
// the user, password and patterns.
var aclPerms = []string{
	"+evalsha", "+eval", // the scripts, EVAL after NOSCRIPT
	"+get", "+set", "+incr", "+pexpire", "+pttl", "+del", "+publish", "+exists", "+sismember", "+sadd", // called by the scripts
	"+lpop", "+lpush", "+rpush", "+lrange", "+lset", "+lrem", "+time", "+mget", // the queue of waiters (wait.lua, release.lua)
	"+subscribe", "+unsubscribe", // waiters
	"+ping", "+cluster|slots", // rueidis: health checks, topology detection
	"+info", // redis.New reads maxmemory-policy
}

func aclRule(user, pass, keyPattern string, perms []string) string {
	return "user " + user + " on >" + pass + " resetchannels resetkeys -@all ~" + keyPattern + " &" + keyPattern + " " + strings.Join(perms, " ")
}

func without(perms []string, drop string) []string {
	var out []string
	for _, p := range perms {
		if p != drop {
			out = append(out, p)
		}
	}
	return out
}

// startTLSACL starts a TLS-only server (test CA, tls-port, port 0) with an
// admin user for the test's own redis-cli calls and the fencedlock user
// given by rule; it returns a client logged in as fencedlock over TLS.
func startTLSACL(t *testing.T, rule string) (*testserver.Redis, rueidis.Client) {
	t.Helper()
	srv := testserver.StartRedis(t, testserver.WithTLS(testserver.NewTLS(t)),
		testserver.WithUser("admin", "admin-pw"), testserver.WithConfig(rule))
	c := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "fencedlock", "lock-pw" })
	return srv, c
}

// TestTLSAndACL runs the whole lock life cycle over TLS as a user allowed
// only the commands, keys and channels of docs/redis-acl.md, and checks
// that the server's ACL LOG records no denial; then shows that each missing
// permission fails with a clear NOPERM error and leaves nothing behind.
func TestTLSAndACL(t *testing.T) {
	t.Run("least privilege works", func(t *testing.T) {
		srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", aclPerms))
		c2 := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "fencedlock", "lock-pw" })
		if out := cliOK(t, srv, "CONFIG", "GET", "port"); !strings.HasSuffix(out, "\n0") {
			t.Fatalf("plain port open: %q", out)
		}
		b := newBackend(t, c, redis.Options{})
		b2 := newBackend(t, c2, redis.Options{})
		opts := fencedlock.Options{TTL: keptTTL}
		l, l2 := newLocker(t, b, opts), newLocker(t, b2, fencedlock.Options{TTL: 30 * time.Second})
		ctx := ctxT(t, 20*time.Second)
		ls, err := l.TryAcquire(ctx, "tls")
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // two renewals by the watchdog
			waitRenewed(t, l, ls, time.Now())
		}
		got := make(chan error, 1)
		go func() {
			wl, err := l2.Acquire(ctx, "tls") // woken by the release's PUBLISH
			if err == nil {
				err = wl.Release(ctx)
			}
			got <- err
		}()
		waitSubscribed(t, srv, b.Channel("tls"))
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if info, err := b.Inspect(ctx, "tls"); err != nil || info.Held || info.Fence != ls.Fence()+1 {
			t.Fatalf("inspect: %+v, %v", info, err)
		}
		if out := cliOK(t, srv, "ACL", "LOG"); out != "" {
			t.Fatalf("ACL LOG records denials:\n%s", out)
		}
	})

	denied := []struct {
		name, drop, prefix string
		check              func(t *testing.T, l *fencedlock.Locker, b *redis.Backend) error
	}{
		{name: "no EVALSHA", drop: "+evalsha", check: tryAcquire},
		{name: "no INCR in the acquire script", drop: "+incr", check: tryAcquire},
		{name: "key outside the pattern", prefix: "other:", check: tryAcquire},
		{name: "no PUBLISH in the release script", drop: "+publish", check: func(t *testing.T, l *fencedlock.Locker, b *redis.Backend) error {
			ls, err := l.TryAcquire(ctxT(t, 5*time.Second), "denied")
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			err = b.Release(ctxT(t, 5*time.Second), driver.Grant{Key: "denied", Owner: "not-the-owner"})
			if !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("release with another token: %v, want ErrNotHeld before any PUBLISH", err)
			}
			err = ls.Release(ctxT(t, 5*time.Second))
			// The script publishes before it deletes: the refused PUBLISH
			// left the lock in place (it expires with its TTL).
			info, ierr := b.Inspect(ctxT(t, 5*time.Second), "denied")
			if ierr != nil || !info.Held {
				t.Fatalf("a failed release deleted the lock: %+v, %v", info, ierr)
			}
			waitExpired(t, b, "denied")
			return err
		}},
		{name: "no PEXPIRE for renew", drop: "+pexpire", check: func(t *testing.T, _ *fencedlock.Locker, b *redis.Backend) error {
			// ManualRenew: the denied Renew below is the last renewal when
			// the local deadline passes. (With the watchdog, its retry cut
			// short by the deadline replaced the denial by "context deadline
			// exceeded" in the reason, under load.) keptTTL: the lease must
			// not end before Renew is called.
			l := newLocker(t, b, fencedlock.Options{TTL: keptTTL, ManualRenew: true})
			ls, err := l.TryAcquire(ctxT(t, 5*time.Second), "denied")
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			err = ls.Renew(ctxT(t, 5*time.Second))
			if errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("a denied renewal reported as not held: %v", err)
			}
			<-ls.Done() // lost at the local deadline: no renewal can succeed
			if err := ls.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) || !deniedByACL(err) {
				t.Fatalf("lease end %v, want lost with the denied renewal's error", err)
			}
			waitExpired(t, b, "denied") // a safety margin later
			return err
		}},
	}
	for _, d := range denied {
		t.Run(d.name, func(t *testing.T) {
			perms := aclPerms
			if d.drop != "" {
				perms = without(aclPerms, d.drop)
			}
			srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", perms))
			b := newBackend(t, c, redis.Options{KeyPrefix: d.prefix})
			l := newLocker(t, b, fencedlock.Options{TTL: keptTTL})
			err := d.check(t, l, b)
			if err == nil || !deniedByACL(err) || !strings.HasPrefix(err.Error(), "fencedlock: ") && !strings.HasPrefix(err.Error(), "redis: ") {
				t.Fatalf("error %v, want an ACL denial", err)
			}
			if errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("a permission error reported as contention: %v", err)
			}
			// The lock key never stays behind (the Locker releases what a
			// failed acquire may have taken).
			time.Sleep(50 * time.Millisecond)
			if keys := cliOK(t, srv, "KEYS", "*{denied}"); keys != "" {
				t.Fatalf("lock key left behind: %q", keys)
			}
			t.Logf("%s: %v", d.name, err)
		})
	}
}

func tryAcquire(t *testing.T, l *fencedlock.Locker, b *redis.Backend) error {
	ls, err := l.TryAcquire(ctxT(t, 5*time.Second), "denied")
	if err == nil {
		ls.Release(context.Background())
		t.Fatal("acquired without the permission")
	}
	return err
}

// deniedByACL recognises the server's ACL errors: NOPERM for a command or
// key the client sends, and the script error for a command a script calls.
func deniedByACL(err error) bool {
	return strings.Contains(err.Error(), "NOPERM") ||
		strings.Contains(err.Error(), "user executing the script can't run this command")
}

// waitExpired waits until key's lock expired on the server, for up to
// keptTTL and a second.
func waitExpired(t *testing.T, b *redis.Backend, key string) {
	t.Helper()
	limit := time.Now().Add(keptTTL + time.Second)
	for {
		info, err := b.Inspect(ctxT(t, 5*time.Second), key)
		if err == nil && !info.Held {
			return
		}
		if time.Now().After(limit) {
			t.Fatalf("%s still held %v later: %+v, %v", key, keptTTL+time.Second, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitSubscribed(t *testing.T, srv *testserver.Redis, channel string) {
	t.Helper()
	for i := 0; ; i++ {
		out := cliOK(t, srv, "PUBSUB", "NUMSUB", channel)
		if f := strings.Fields(out); len(f) == 2 && f[1] == "1" {
			return
		}
		if i > 200 {
			t.Fatalf("no subscriber on %s", channel)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTLSAndACLFair: waiters queue and are handed the lock, over TLS, as
// a user with the rule of docs/redis-acl.md (the list commands of the
// queue, TIME for its entries' expiry and MGET, wait.lua reading the lock
// and its counter at once, included), and ACL LOG records no denial.
func TestTLSAndACLFair(t *testing.T) {
	srv, c := startTLSACL(t, aclRule("fencedlock", "lock-pw", "fencedlock:*", aclPerms))
	c2 := srv.Client(t, func(o *rueidis.ClientOption) { o.Username, o.Password = "fencedlock", "lock-pw" })
	b := newBackend(t, c, redis.Options{})
	f, err := redis.New(c2, redis.Options{})
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
			t.Fatal("the waiter did not queue within 10s")
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
