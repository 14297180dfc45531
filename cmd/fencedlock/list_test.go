//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestListMillionKeys runs `fencedlock list` on a real redis-server holding
// 1,000,000 other keys (DEBUG POPULATE) and a few locks, some with awkward
// names. It checks that the listing finishes, lists exactly the locks
// (held, free with a counter, under a prefix or not), and never blocks the
// server: the slowest command the listing sent, as the server's SLOWLOG
// measured it, and the slowest concurrent PING a client saw, are logged
// and compared with one KEYS over the same keyspace (what list must never
// do).
func TestListMillionKeys(t *testing.T) {
	s, url := redisServerWith(t, testserver.WithConfig("enable-debug-command local"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client(t, nil)
	if err := c.Do(ctx, c.B().Arbitrary("DEBUG", "POPULATE").Args("1000000", "junk").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b, err := redisb.New(c, redisb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	held := []string{"batch/1", "batch/2", "batch/{braces}*?[glob]", "batch/%25 percent", "other/x"}
	for _, k := range held {
		if _, err := locker.TryAcquire(ctx, k); err != nil {
			t.Fatal(k, err)
		}
	}
	free, err := locker.TryAcquire(ctx, "batch/free")
	if err != nil {
		t.Fatal(err)
	}
	if err := free.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Keys under the prefix that are not locks: ignored.
	for _, k := range []string{"fencedlock:notalock", "fencedlock:{batch/1}:released", "fencedlock:{batch/zz"} {
		if err := c.Do(ctx, c.B().Set().Key(k).Value("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	if err != nil || n < 1000000 {
		t.Fatalf("DBSIZE %d, %v", n, err)
	}

	// One KEYS over the keyspace, the blocking call list avoids: its
	// server time is the yardstick.
	slowlog(t, ctx, c, "0")
	if err := c.Do(ctx, c.B().Keys().Pattern("fencedlock:{batch/*").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	keysUS := maxCommandUS(slowlogEntries(t, ctx, c), "KEYS")

	// A concurrent PING every 2 ms on its own connection.
	pinger := s.Client(t, nil)
	var (
		mu    sync.Mutex
		pings []time.Duration
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			t0 := time.Now()
			if err := pinger.Do(ctx, pinger.B().Ping().Build()).Error(); err != nil {
				t.Error(err)
				return
			}
			d := time.Since(t0)
			mu.Lock()
			pings = append(pings, d)
			mu.Unlock()
		}
	}()

	// The same PINGs for 2 s with no listing: the noise of this machine.
	time.Sleep(2 * time.Second)
	mu.Lock()
	idle := pings
	pings = nil
	mu.Unlock()

	slowlog(t, ctx, c, "0")
	env := []string{"FENCEDLOCK_REDIS=" + url}
	t0 := time.Now()
	code, p := bin.Run(t, env, "list", "--json", "--timeout", "2m", "batch/")
	elapsed := time.Since(t0)
	close(stop)
	wg.Wait()
	if code != exitOK {
		t.Fatalf("list batch/: exit %d; stderr:\n%s", code, p.Stderr)
	}
	entries := slowlogEntries(t, ctx, c)
	var scanUS []int64
	for _, e := range entries {
		if e.cmd == "SCAN" {
			scanUS = append(scanUS, e.us)
		}
	}
	slices.Sort(scanUS)
	scans := len(scanUS)
	if scans < int(n/1000) {
		t.Fatalf("%d SCAN calls for %d keys with COUNT 1000: the listing did not page", scans, n)
	}
	p50, p99, top := scanUS[scans/2], scanUS[scans*99/100], scanUS[scans-1]
	t.Logf("list over %d keys: %v, %d SCAN calls (COUNT 1000); server time per SCAN p50 %d µs, p99 %d µs, max %d µs; one KEYS %d µs; concurrent PINGs (round trip seen by the client) during the listing %s, in 2 s before it %s",
		n, elapsed.Round(time.Millisecond), scans, p50, p99, top, keysUS, pingStats(pings), pingStats(idle))
	// The server is never busy with the listing for long: a SCAN call does
	// a thousandth of the work of KEYS. The server's own clock counts the
	// time the OS took its CPU away (2 cores shared by many tests), so a
	// few calls measure long without the server having worked long: the
	// median is compared, with a 10x margin, and p99 and the max logged.
	// (The 99th percentile was compared until a run beside a second `make
	// test` and two more suites, load average 15, measured it at 1/9 of
	// KEYS while the median was 1/104: the preempted calls were over 1%.)
	if keysUS < 1000 || p50*10 > keysUS {
		t.Errorf("SCAN p50 %d µs (p99 %d µs) vs KEYS %d µs: the listing holds the server too long per call", p50, p99, keysUS)
	}
	if slices.Max(pings) > time.Second {
		t.Errorf("a concurrent PING waited %v during the listing", slices.Max(pings))
	}

	var got []inspectOutput
	for _, line := range strings.Split(strings.TrimSpace(p.Stdout.String()), "\n") {
		var o inspectOutput
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, o)
	}
	var names []string
	for _, o := range got {
		names = append(names, o.Key)
		wantHeld := o.Key != "batch/free"
		if o.Held != wantHeld || o.Fence != 1 || (o.Held && (len(o.Holder) != 16 || o.TTLms <= 0 || o.TTLms > 60000)) {
			t.Errorf("listed %+v: want held=%v with fence 1, a holder id and a TTL", o, wantHeld)
		}
	}
	slices.Sort(names)
	want := []string{"batch/%25 percent", "batch/1", "batch/2", "batch/free", "batch/{braces}*?[glob]"}
	if !slices.Equal(names, want) {
		t.Errorf("list batch/ = %q, want %q", names, want)
	}

	// No prefix: every lock, as a table; --max bounds it.
	code, p = bin.Run(t, env, "list", "--count", "5000", "--pace", "0s")
	if code != exitOK || strings.Count(p.Stdout.String(), "\n") != 1+len(held)+1 || !strings.Contains(p.Stdout.String(), `"other/x"`) {
		t.Errorf("list: exit %d, output:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
	code, p = bin.Run(t, env, "list", "--count", "5000", "--pace", "0s", "--max", "2")
	if code != exitFailure || strings.Count(p.Stdout.String(), "\n") != 1+2 || !strings.Contains(p.Stderr.String(), "--max 2") {
		t.Errorf("list --max 2: exit %d, output:\n%s\nstderr:\n%s", code, p.Stdout, p.Stderr)
	}
}

type slowEntry struct {
	cmd string
	us  int64
}

// slowlog resets the SLOWLOG and logs every command slower than us µs.
func slowlog(t *testing.T, ctx context.Context, c rueidis.Client, us string) {
	t.Helper()
	for _, cmd := range []rueidis.Completed{
		c.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", us).ParameterValue("slowlog-max-len", "100000").Build(),
		c.B().SlowlogReset().Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

func slowlogEntries(t *testing.T, ctx context.Context, c rueidis.Client) []slowEntry {
	t.Helper()
	vals, err := c.Do(ctx, c.B().SlowlogGet().Count(-1).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	var out []slowEntry
	for _, v := range vals {
		e, err := v.ToArray()
		if err != nil || len(e) < 4 {
			t.Fatalf("slowlog entry %v: %v", v, err)
		}
		us, _ := e[2].AsInt64()
		args, _ := e[3].AsStrSlice()
		if len(args) > 0 {
			out = append(out, slowEntry{strings.ToUpper(args[0]), us})
		}
	}
	return out
}

func maxCommandUS(es []slowEntry, cmd string) int64 {
	var m int64
	for _, e := range es {
		if e.cmd == cmd {
			m = max(m, e.us)
		}
	}
	return m
}

// pingStats renders the count, median, 99th percentile and max of ds.
func pingStats(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	if len(ds) == 0 {
		return "none"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50 %v p99 %v max %v", len(ds), r(ds[len(ds)/2]), r(ds[len(ds)*99/100]), r(ds[len(ds)-1]))
}
