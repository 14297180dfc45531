// Package harness is what every test module that runs the etcd
// framework's in-process clusters (go.etcd.io/etcd/tests/v3/framework/
// integration) needs once: a TestMain step that refuses -short and slows
// the clusters' elections for loaded machines, and per-test checks that
// fail, never skip, when the framework skips a test or a test leaks
// goroutines. backend/etcd/clustertest, otel/etcdtest and
// cmd/fencedlock/etcdtest use it; it lives in clustertest's module so
// that the etcd server stays out of the library's dependency graph.
package harness

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/testutil"
	"go.etcd.io/etcd/tests/v3/framework/integration"
)

// Setup is the first step of a TestMain of the test package name (the
// prefix of its messages): it parses the flags, exits with status 2 under
// -short (the framework would skip every cluster test and the run would
// pass without testing anything), and sets the clusters' election timeout
// to 30 ticks (300 ms). The framework's 100 ms (10 ticks of 10 ms) makes a
// loaded 2-core machine running -race change leaders spuriously; a
// proposal lost in a leader change then hangs its request until the
// caller's deadline. 300 ms keeps elections quick and the server's minimum
// lease TTL at 1 s.
func Setup(name string) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintf(os.Stderr, "%s: refusing -short: the etcd framework would skip every cluster test and the run would pass without testing anything\n", name)
		os.Exit(2)
	}
	integration.ElectionTicks = 30
}

// NoSkip fails t, at its end, if the framework skipped it (it skips
// clusters under -short and on a goroutine it takes for a leak).
func NoSkip(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Skipped() {
			t.Errorf("%s: the etcd framework skipped %s; skipping is not allowed", name, t.Name())
		}
	})
}

// LeakWait is how long a goroutine may outlive the test that started it
// before BeforeTest counts it as leaked.
const LeakWait = 5 * time.Second

// BeforeTest is NoSkip and integration.BeforeTest with the framework's
// leak check replaced by one that waits. The framework's looks once
// (10 ms) before the test and skips the test if any goroutine of interest
// runs at that instant, which includes the brief goroutine of any context
// deadline timer firing then (an etcd client's or server's request
// deadline outliving its cluster): CI failed clustertest's
// TestKeepAliveInterval that way, on context.WithDeadlineCause.func2 with
// nothing leaked. Here the test fails (never skips) on goroutines still
// running LeakWait after the previous test ended or after this one did.
func BeforeTest(t testing.TB, name string) {
	t.Helper()
	NoSkip(t, name)
	if err := testutil.CheckAfterTest(LeakWait); err != nil {
		t.Fatalf("%s: before %s: an earlier test %v", name, t.Name(), err)
	}
	integration.BeforeTest(t, integration.WithoutGoLeakDetection())
	t.Cleanup(func() {
		if t.Failed() {
			return // its goroutines may be why; the failure is reported already
		}
		if err := testutil.CheckAfterTest(LeakWait); err != nil {
			t.Errorf("%s: %s %v", name, t.Name(), err)
		}
	})
}
