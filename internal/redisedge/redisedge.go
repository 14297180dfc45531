// Package redisedge holds test scenarios that both Redis backends
// (backend/redis on rueidis, backend/goredis on go-redis) run against a
// real redis-server, written once: the permission errors a script can
// meet (every one must be permanent), and a reply lost after the server
// applied a script (its outcome must be reported exactly once, never as
// "not held"). Each backend's tests pass a [Dial] that builds the backend
// on its own client.
package redisedge

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// Dial returns a backend whose client connects to addr as user (with
// password; both empty: the default user), closed when the test ends. It
// uses the client's default options, as a user would.
type Dial func(t testing.TB, addr, user, password string) driver.Backend

// Admin is the user the scenarios' servers give full access to, for the
// scenarios' own checks (redis-cli).
const (
	Admin         = "admin"
	AdminPassword = "admin-pw"
)

// cli runs redis-cli as Admin and fails the test on an error.
func cli(t testing.TB, srv *testserver.Redis, args ...string) string {
	t.Helper()
	out, err := srv.CLI(t, args...)
	if err != nil {
		t.Fatalf("redis-cli %v: %v (%s)", args, err, out)
	}
	return strings.TrimSpace(out)
}

// commandCalls returns the calls of each command so far (INFO
// commandstats), by lower-case name.
func commandCalls(t testing.TB, srv *testserver.Redis) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, line := range strings.Split(cli(t, srv, "INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[name] = n
			}
		}
	}
	return calls
}

// scriptCalls is the number of EVALSHA and EVAL calls so far.
func scriptCalls(t testing.TB, srv *testserver.Redis) int64 {
	c := commandCalls(t, srv)
	return c["evalsha"] + c["eval"]
}

// ctxT is a context ended after d or at the end of the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
