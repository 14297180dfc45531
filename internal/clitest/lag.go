package clitest

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/schedlag"
)

// Lag measures how late the test process is scheduled while it runs
// (a [schedlag.Monitor]: the largest oversleep of a goroutine that sleeps
// schedlag.Tick in a loop, read with Max). On a loaded machine the binary
// under test is delayed alike; a test that a late binary makes
// inconclusive sizes its retry by what Lag measured.
type Lag = schedlag.Monitor

// StartLag starts measuring; the measurement stops when the test ends.
func StartLag(t *testing.T) *Lag {
	l := schedlag.Start()
	t.Cleanup(l.Stop)
	return l
}

// switchMsg is what fencedlock run's supervisor writes when it fires its
// dead man's switch because no lease extension came in time.
var switchMsg = regexp.MustCompile(`no lease extension from fencedlock \([^)]*\); local deadline (\S+) in (\S+): sending SIGTERM`)

// SwitchFired reports whether stderr (of fencedlock run) says that the
// supervisor terminated the command because no lease extension came in
// time, and when: the local deadline the message names less the time it
// says was left (wall clock, to the millisecond).
func SwitchFired(stderr string) (at time.Time, fired bool) {
	m := switchMsg.FindStringSubmatch(stderr)
	if m == nil {
		return time.Time{}, false
	}
	dl, err1 := time.Parse(time.RFC3339Nano, m[1])
	left, err2 := time.ParseDuration(m[2])
	if err1 != nil || err2 != nil {
		return time.Time{}, true
	}
	return dl.Add(-left), true
}

// SwitchLateness is how late a renewal was, at least, when the switch of
// fencedlock run --ttl ttl --grace grace fired with the lease healthy: the
// deadline sent after a renewal is ttl-ttl/10 after it, the next renewal
// is due ttl/3 later, and SIGTERM goes out ttl/10+min(grace, ttl/4) before
// the deadline (docs/cli-run.md).
func SwitchLateness(ttl, grace time.Duration) time.Duration {
	return ttl - ttl/10 - ttl/10 - min(grace, ttl/4) - ttl/3
}

// RetryTTL is the --ttl for the one retry of a run that the switch cut
// short with a lease of ttl and grace, while Lag measured lag: 8x the
// larger of two lags and the lateness the switch implies, rounded up to
// 100ms. The switch tolerates a renewal late by about SwitchLateness
// (0.22x the TTL, less the up to 50ms run takes to pass the deadline on),
// so a TTL of 4.6x a delay is just enough; 8x leaves room for a delay
// that grows by 70% between the attempts. Two lags: a waiter handed the
// lock in the server's queue (Redis, etcd) holds a lease dated from its
// last request, before the hand-off, and is woken by a message, one
// scheduling delay more within the same budget before its first renewal
// (measured on Redis at load 22-29: 3 and 5 of 8 runs cut at --ttl 1s,
// and 2 of 8 again in a retry sized by one lag).
func RetryTTL(ttl, grace, lag time.Duration) time.Duration {
	d := 8 * max(2*lag, SwitchLateness(ttl, grace))
	const step = 100 * time.Millisecond
	return (d + step - 1) / step * step
}

// SwitchCut returns the cut function of RunsDisjoint for fencedlock run:
// a run that the supervisor's dead man's switch cut short (exit
// exitLeaseLost, the switch's message) while the server still kept its
// lease (run did not report the lease lost).
func SwitchCut(exitLeaseLost int) func(code int, stderr string) bool {
	return func(code int, stderr string) bool {
		_, fired := SwitchFired(stderr)
		return code == exitLeaseLost && fired && !strings.Contains(stderr, "fencedlock run: lease on ")
	}
}
