package redisedge

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/redistest"
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
	srv := redistest.Start(t, redistest.WithUser(Admin, AdminPassword))
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	b := dial(t, p.Addr(), Admin, AdminPassword)
	ctx := ctxT(t, 30*time.Second)
	owner := 0
	req := func(key string) driver.AcquireRequest {
		owner++
		return driver.AcquireRequest{Key: key, Owner: "lost-reply-owner-" + string(rune('a'+owner)), TTL: lostReplyTTL}
	}
	// Load the scripts and open the connections, so that the cut reply is
	// the script's.
	g, err := b.Acquire(ctx, req("warm"))
	if err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}
	if _, err := b.Renew(ctx, g, lostReplyTTL); err != nil {
		t.Fatalf("warm-up renew: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
	// cut runs op with the next reply cut and checks that the server ran
	// one script for it.
	cut := func(t *testing.T, op func() error) error {
		t.Helper()
		before, cuts := scriptCalls(t, srv), p.RepliesCut()
		p.CutReplies(1)
		err := op()
		p.CutReplies(0)
		if p.RepliesCut() != cuts+1 {
			t.Fatalf("the proxy cut %d replies, want 1 (err %v)", p.RepliesCut()-cuts, err)
		}
		if n := scriptCalls(t, srv) - before; n != 1 {
			t.Errorf("the server ran the script %d times, want once: the client sent it again after its reply was lost (err %v)", n, err)
		}
		return err
	}
	unknown := func(t *testing.T, op string, err error) {
		t.Helper()
		for _, e := range []error{driver.ErrNotHeld, driver.ErrNotAcquired, driver.ErrPermanent} {
			if errors.Is(err, e) {
				t.Fatalf("%s applied, its reply lost: %v, want success or an unknown outcome", op, err)
			}
		}
		t.Logf("%s applied, its reply lost: %v", op, err)
	}
	holder := func(t *testing.T, key string) string {
		t.Helper()
		return cli(t, srv, "GET", "fencedlock:{"+key+"}")
	}
	t.Run("acquire", func(t *testing.T) {
		r := req("lost-acquire")
		var g driver.Grant
		err := cut(t, func() (err error) { g, err = b.Acquire(ctx, r); return err })
		unknown(t, "acquire", err)
		if holder(t, r.Key) != r.Owner {
			t.Fatalf("the acquire was not applied: holder %q", holder(t, r.Key))
		}
		if err == nil && g.Fence == 0 {
			t.Fatalf("acquire granted fence 0")
		}
	})
	t.Run("renew", func(t *testing.T) {
		r := req("lost-renew")
		g, err := b.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		cli(t, srv, "PEXPIRE", "fencedlock:{"+r.Key+"}", "10000")
		err = cut(t, func() error { _, err := b.Renew(ctx, g, lostReplyTTL); return err })
		unknown(t, "renew", err)
		// Set to 10 s above, renewed to 30 s: more than 20 s shows the renewal.
		if pttl, _ := strconv.Atoi(cli(t, srv, "PTTL", "fencedlock:{"+r.Key+"}")); pttl <= 20000 {
			t.Fatalf("the renewal was not applied: PTTL %d", pttl)
		}
	})
	t.Run("release", func(t *testing.T) {
		r := req("lost-release")
		g, err := b.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		err = cut(t, func() error { return b.Release(ctx, g) })
		unknown(t, "release", err)
		if h := holder(t, r.Key); h != "" {
			t.Fatalf("the release was not applied: holder %q", h)
		}
	})
	// The backend still works on its next connection.
	g, err = b.Acquire(context.Background(), req("after"))
	if err != nil {
		t.Fatalf("acquire after the cuts: %v", err)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatalf("release after the cuts: %v", err)
	}
}
