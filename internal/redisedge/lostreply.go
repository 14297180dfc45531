package redisedge

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// lostReplyTTL is the lease of LostReply's locks: long enough that none
// expires during a case.
const lostReplyTTL = 30 * time.Second

// LostReply checks that the lock scripts have exactly-once outcomes when
// the reply of the server is lost after it applied the script: through a
// faultproxy whose CutReplies(1) drops that reply and resets the
// connection, an Acquire, a Renew and a Release of dial's backend each run
// their script on the server exactly once (the client does not send it
// again), the server shows it applied, and the backend reports an outcome
// the driver contract allows: success, or an error that says the outcome
// is unknown (never [driver.ErrNotHeld], never [driver.ErrNotAcquired],
// never [driver.ErrPermanent]: a Release reported "not held" tells the
// caller it lost a lease it released).
func LostReply(t *testing.T, dial Dial) {
	srv := testserver.StartRedis(t, testserver.WithUser(Admin, AdminPassword))
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	lr := &lostReply{srv: srv, p: p, b: dial(t, p.Addr(), Admin, AdminPassword), ctx: ctxT(t, 30*time.Second)}
	b, ctx := lr.b, lr.ctx
	// Load the scripts and open the connections, so that the cut reply is
	// the script's.
	g, err := b.Acquire(ctx, lr.req("warm"))
	if err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}
	if _, err := b.Renew(ctx, g, lostReplyTTL); err != nil {
		t.Fatalf("warm-up renew: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
	t.Run("acquire", lr.acquire)
	t.Run("renew", lr.renew)
	t.Run("release", lr.release)
	// The backend still works on its next connection.
	g, err = b.Acquire(context.Background(), lr.req("after"))
	if err != nil {
		t.Fatalf("acquire after the cuts: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("release after the cuts: %v", err)
	}
}

// lostReply is one run of LostReply: the server, the proxy that cuts its
// replies and the backend under test, through the proxy.
type lostReply struct {
	srv   *testserver.Redis
	p     *faultproxy.Proxy
	b     driver.Backend
	ctx   context.Context
	owner int
}

// req is a request of a new owner for a new key named after name.
func (lr *lostReply) req(name string) driver.AcquireRequest {
	lr.owner++
	n := strconv.Itoa(lr.owner)
	return driver.AcquireRequest{Key: name + "-" + n, Owner: "lost-reply-owner-" + n, TTL: lostReplyTTL}
}

// grant acquires a new key named after name for a new owner (lr.req)
// and fails the test on error.
func (lr *lostReply) grant(t *testing.T, name string) driver.Grant {
	t.Helper()
	g, err := lr.b.Acquire(lr.ctx, lr.req(name))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// cut runs op with the next reply cut and returns how many scripts
// the server ran meanwhile and op's error. The proxy cuts the next reply
// of any connection of the client: one of the client's own (a health
// check's PONG) can come first and fail op before the server ran it
// (0 scripts), which tells nothing; try calls setup and cut again then.
func (lr *lostReply) cut(t *testing.T, op func() error) (int64, error) {
	t.Helper()
	before, cuts := scriptCalls(t, lr.srv), lr.p.RepliesCut()
	lr.p.CutReplies(1)
	err := op()
	lr.p.CutReplies(0)
	if lr.p.RepliesCut() != cuts+1 {
		t.Fatalf("the proxy cut %d replies, want 1 (err %v)", lr.p.RepliesCut()-cuts, err)
	}
	return scriptCalls(t, lr.srv) - before, err
}

// try runs setup and then op with its reply cut, until the server ran
// op's script (at most 5 times), and checks that it ran it once and
// that op's outcome is success or unknown; it returns setup's key.
func (lr *lostReply) try(t *testing.T, name string, setup func() string, op func(key string) error) string {
	t.Helper()
	for range 5 {
		key := setup()
		ran, err := lr.cut(t, func() error { return op(key) })
		if ran == 0 {
			t.Logf("%s: the cut reply was another one (the script did not run): %v; again", name, err)
			continue
		}
		if ran != 1 {
			t.Errorf("the server ran the script %d times, want once: the client sent it again after its reply was lost (err %v)", ran, err)
		}
		for _, e := range []error{driver.ErrNotHeld, driver.ErrNotAcquired, driver.ErrPermanent} {
			if errors.Is(err, e) {
				t.Fatalf("%s applied, its reply lost: %v, want success or an unknown outcome", name, err)
			}
		}
		t.Logf("%s applied, its reply lost: %v", name, err)
		return key
	}
	t.Fatalf("%s: 5 cuts hit other replies", name)
	return ""
}

// holder is the owner recorded in key's lock, "" if none.
func (lr *lostReply) holder(t *testing.T, key string) string {
	t.Helper()
	return cli(t, lr.srv, "GET", "fencedlock:{"+key+"}")
}

// acquire is the case of an Acquire whose reply is lost.
func (lr *lostReply) acquire(t *testing.T) {
	var r driver.AcquireRequest
	var g driver.Grant
	var err error
	lr.try(t, "acquire", func() string { r = lr.req("lost-acquire"); return r.Key }, func(string) error {
		g, err = lr.b.Acquire(lr.ctx, r)
		return err
	})
	if h := lr.holder(t, r.Key); h != r.Owner {
		t.Fatalf("the acquire was not applied: holder %q", h)
	}
	if err == nil && g.Fence == 0 {
		t.Fatalf("acquire granted fence 0")
	}
}

// renew is the case of a Renew whose reply is lost.
func (lr *lostReply) renew(t *testing.T) {
	var g driver.Grant
	setup := func() string {
		g = lr.grant(t, "lost-renew")
		cli(t, lr.srv, "PEXPIRE", "fencedlock:{"+g.Key+"}", "10000")
		return g.Key
	}
	key := lr.try(t, "renew", setup, func(string) error { _, err := lr.b.Renew(lr.ctx, g, lostReplyTTL); return err })
	// Set to 10 s above, renewed to 30 s: more than 20 s shows the renewal.
	if pttl, _ := strconv.Atoi(cli(t, lr.srv, "PTTL", "fencedlock:{"+key+"}")); pttl <= 20000 {
		t.Fatalf("the renewal was not applied: PTTL %d", pttl)
	}
}

// release is the case of a Release whose reply is lost.
func (lr *lostReply) release(t *testing.T) {
	var g driver.Grant
	setup := func() string {
		g = lr.grant(t, "lost-release")
		return g.Key
	}
	key := lr.try(t, "release", setup, func(string) error { return lr.b.Release(lr.ctx, g) })
	if h := lr.holder(t, key); h != "" {
		t.Fatalf("the release was not applied: holder %q", h)
	}
}
