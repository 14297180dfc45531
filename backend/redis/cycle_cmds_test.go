package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestUncontendedCycleCommands pins what one uncontended Acquire and
// Release cost the server (INFO commandstats, commands run inside scripts
// included; SLOWLOG for what each EVALSHA carries), the hot path every
// command and argument of which is server time: acquire.lua checks the
// abandoned set with EXISTS (no SHA-1 of the owner unless the set
// exists), release.lua gets the lock, the queue and the fence counter and
// the owner alone (not the abandoned set and two empty arguments).
func TestUncontendedCycleCommands(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "cycle", Owner: owner(), TTL: 10 * time.Second}
	cycle := func() {
		t.Helper()
		g, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the scripts (EVALSHA, NOSCRIPT, EVAL)
	do(t, c, "CONFIG", "SET", "slowlog-log-slower-than", "0")
	do(t, c, "CONFIG", "SET", "slowlog-max-len", "128")
	do(t, c, "SLOWLOG", "RESET")
	do(t, c, "CONFIG", "RESETSTAT")
	cycle()
	got := commandStats(t, c)
	for _, k := range []string{"config|resetstat", "info"} {
		delete(got, k)
	}
	// acquire.lua: EVALSHA, EXISTS abandoned, SET NX PX, INCR, PTTL fence;
	// release.lua: EVALSHA, EXISTS queue, GET, PUBLISH, DEL.
	want := map[string]int64{"evalsha": 2, "exists": 2, "set": 1, "incr": 1, "pttl": 1, "get": 1, "publish": 1, "del": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("one acquire and release ran %v, want %v", got, want)
	}

	entries, err := c.Do(ctx, c.B().SlowlogGet().Count(128).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	lk := b.LockKey("cycle")
	wantArgs := map[string]string{
		redisscript.AcquireSHA: fmt.Sprint([]string{"EVALSHA", redisscript.AcquireSHA, "3", lk, lk + fenceSuffix, lk + abandonedSuffix, req.Owner, "10000"}),
		redisscript.ReleaseSHA: fmt.Sprint([]string{"EVALSHA", redisscript.ReleaseSHA, "3", lk, lk + queueSuffix, lk + fenceSuffix, req.Owner}),
	}
	seen := 0
	for _, e := range entries {
		fields, err := e.ToArray()
		if err != nil || len(fields) < 4 {
			t.Fatalf("SLOWLOG entry %v: %v", e, err)
		}
		args, err := fields[3].AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(args) < 2 || args[0] != "EVALSHA" && args[0] != "evalsha" {
			continue
		}
		args[0] = "EVALSHA"
		w, ok := wantArgs[args[1]]
		if !ok {
			t.Errorf("unexpected EVALSHA %v", args)
			continue
		}
		seen++
		if fmt.Sprint(args) != w {
			t.Errorf("sent %v\nwant %s", args, w)
		}
	}
	if seen != 2 {
		t.Errorf("SLOWLOG holds %d EVALSHA, want 2", seen)
	}
}

// TestAcquireAbandonedSetChecked: the abandoned-owner check of
// acquire.lua reads the set only while it exists (EXISTS first), and then
// still refuses nothing but the abandoned owner, and a key of another type
// in its place as corrupt, with nothing written.
func TestAcquireAbandonedSetChecked(t *testing.T) {
	srv := redistest.Start(t)
	b, c := newBackend(t, srv, Options{})
	ctx := context.Background()
	lk := b.LockKey("abandoned-set")
	if err := b.Release(ctx, acquire(t, b, "warm-up", 10*time.Second)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	// Another owner was cleaned up recently: the set exists.
	do(t, c, "SADD", lk+abandonedSuffix, "0000000000000000000000000000000000000000")
	do(t, c, "PEXPIRE", lk+abandonedSuffix, "60000")
	do(t, c, "CONFIG", "RESETSTAT")
	g := acquire(t, b, "abandoned-set", 10*time.Second)
	got := commandStats(t, c)
	delete(got, "config|resetstat")
	delete(got, "info")
	want := map[string]int64{"evalsha": 1, "exists": 1, "sismember": 1, "set": 1, "incr": 1, "pttl": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("acquire with an abandoned set ran %v, want %v", got, want)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}

	// A key of another type where the set should be.
	wk := b.LockKey("abandoned-wrongtype")
	do(t, c, "SET", wk+abandonedSuffix, "not a set")
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "abandoned-wrongtype", Owner: owner(), TTL: 10 * time.Second})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("acquire with a string as the abandoned set: %v, want ErrCorrupt", err)
	}
	if n := num(t, c, "EXISTS", wk, wk+fenceSuffix); n != 0 {
		t.Errorf("the refused acquire wrote %d keys", n)
	}
}
