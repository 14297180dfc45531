package redisedge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// Denial is one permission error the server returns to a lock operation:
// the ACL rule of the user who meets it and the text it carries.
type Denial struct {
	Name  string // the subtest's name
	User  string // the ACL user, password "pw"
	Rule  string // the user's rule after "user NAME on >pw"
	Want  string // a part of the server's message
	Flush bool   // SCRIPT FLUSH before each attempt (the script must come by EVAL)
}

// Denials are the permission errors redis-server 7.0 returns to an
// acquire, each through another path: a command a script calls (through
// redis.call, which adds " script: SHA, on @user_script:N.", and through
// redis.pcall, whose error the script returns as it is), EVALSHA or EVAL
// itself (a -NOPERM reply, no NOSCRIPT), and a key the request names.
// (A key a script reaches without naming it, and a channel, cannot deny an
// acquire: every key of the scripts is declared, and only a release
// publishes; see ReleaseDenials.)
var Denials = []Denial{
	{Name: "command in the script, redis.pcall (-incr)", User: "noincr", Rule: "~* &* +@all -incr",
		Want: "The user executing the script can't run this command or subcommand"},
	{Name: "command in the script, redis.call (-exists)", User: "noexists", Rule: "~* &* +@all -exists",
		Want: "The user executing the script can't run this command or subcommand script: "},
	{Name: "EVALSHA (-NOPERM)", User: "noevalsha", Rule: "~* &* +@all -evalsha",
		Want: "NOPERM this user has no permissions to run the 'evalsha' command"},
	{Name: "EVAL after NOSCRIPT (-NOPERM)", User: "noeval", Rule: "~* &* +@all -eval", Flush: true,
		Want: "NOPERM this user has no permissions to run the 'eval' command"},
	{Name: "a key of the request (-NOPERM)", User: "nokey", Rule: "~other:* &* +@all",
		Want: "NOPERM this user has no permissions to access one of the keys used as arguments"},
	{Name: "a key of the request, read-only (-NOPERM)", User: "readonly", Rule: "%R~* &* +@all",
		Want: "NOPERM this user has no permissions to access one of the keys used as arguments"},
}

// ReleaseDenials are the permission errors redis-server 7.0 returns to a
// release and to no acquire: the release channel, which the release script
// publishes on without naming it.
var ReleaseDenials = []Denial{
	{Name: "channel in the release script", User: "nochannel", Rule: "~* resetchannels +@all",
		Want: "The user executing the script can't publish to the channel mentioned in the command"},
}

// startACL starts a server with Admin and the users of ds.
func startACL(t *testing.T, ds []Denial) *testserver.Redis {
	t.Helper()
	var lines []string
	for _, d := range ds {
		lines = append(lines, "user "+d.User+" on >pw "+d.Rule)
	}
	return testserver.StartRedis(t, testserver.WithUser(Admin, AdminPassword), testserver.WithConfig(lines...))
}

// checkPermanent fails the test unless err is d's denial, permanent and
// not ended by a context (the Locker gave up at once).
func checkPermanent(t *testing.T, d Denial, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: no error without the permission", what)
	case !strings.Contains(err.Error(), d.Want):
		t.Errorf("%s: %v, want the server's %q", what, err, d.Want)
	case !errors.Is(err, driver.ErrPermanent):
		t.Errorf("%s: %v: not ErrPermanent", what, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		t.Errorf("%s: %v: ended by its context, not at the denial", what, err)
	case errors.Is(err, driver.ErrNotAcquired) || errors.Is(err, driver.ErrNotHeld):
		t.Errorf("%s: %v: a denial reported as contention or loss", what, err)
	}
}

// waitLimit bounds the blocking Acquire of ACLDenials: a denial that is
// not permanent keeps it retrying until then, and the test fails with the
// context's error.
const waitLimit = 10 * time.Second

// ACLDenials runs, for each of Denials, a TryAcquire and a blocking
// Acquire (10 s context) of a Locker on dial's backend logged in as the
// denied user: each must fail with the server's message, wrapping
// driver.ErrPermanent, at the first denial (not with its context's error),
// and leave no lock key behind. Then the same for the release of
// ReleaseDenials (a Lease's Release).
func ACLDenials(t *testing.T, dial Dial) {
	srv := startACL(t, append(append([]Denial(nil), Denials...), ReleaseDenials...))
	for _, d := range Denials {
		t.Run(d.Name, func(t *testing.T) {
			b := dial(t, srv.Addr, d.User, "pw")
			l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			key := "denied-" + d.User
			if d.Flush {
				cli(t, srv, "SCRIPT", "FLUSH")
			}
			ls, err := l.TryAcquire(ctxT(t, waitLimit), key)
			if err == nil {
				ls.Release(context.Background())
			}
			checkPermanent(t, d, "TryAcquire", err)
			if d.Flush {
				cli(t, srv, "SCRIPT", "FLUSH")
			}
			ls, err = l.Acquire(ctxT(t, waitLimit), key)
			if err == nil {
				ls.Release(context.Background())
			}
			checkPermanent(t, d, "Acquire", err)
			if keys := cli(t, srv, "KEYS", "*{"+key+"}"); keys != "" {
				t.Fatalf("lock key left behind: %q", keys)
			}
			t.Logf("%v", err)
		})
	}
	for _, d := range ReleaseDenials {
		t.Run(d.Name, func(t *testing.T) {
			b := dial(t, srv.Addr, d.User, "pw")
			l, err := fencedlock.New(b, fencedlock.Options{TTL: 10 * time.Second, ReleaseTimeout: waitLimit})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			key := "denied-" + d.User
			ls, err := l.TryAcquire(ctxT(t, waitLimit), key)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			err = ls.Release(ctxT(t, waitLimit))
			checkPermanent(t, d, "Release", err)
			cli(t, srv, "DEL", "fencedlock:{"+key+"}")
			t.Logf("%v", err)
		})
	}
}
