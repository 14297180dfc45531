package redis

// The uncontended hot path on a real redis-server: what an Acquire and a
// Release allocate and send (plain and fair, backend and Locker), and the
// abandoned-owner check it keeps cheap and correct.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// TestHotPathAllocs (real redis-server): the keys of a lock are made once
// per Acquire and kept in the Grant, so Renew allocates nothing and an
// Acquire+Release of the backend 2 times (the keys and the string of
// their names); through the Locker an uncontended Acquire+Release costs
// at most 8 (more under the race detector, see raceEnabled). Before: Renew 1 (the lock key escaped again), the backend's
// Acquire+Release 6, the Locker's 13.
func TestHotPathAllocs(t *testing.T) {
	b, _ := startBackend(t)
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "k", Owner: owner(), TTL: 10 * time.Second}
	cycle := minAllocs(func() {
		g, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	})
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	renew := minAllocs(func() {
		if _, err := b.Renew(ctx, g, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	l := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
	defer l.Close()
	locker := minAllocs(func() {
		ls, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations: backend Acquire+Release %v, Renew %v, Locker Acquire+Release %v", cycle, renew, locker)
	want := [3]float64{2, 0, 8}
	if raceEnabled {
		want = [3]float64{6, 2, 12} // measured 4, 1, 9: pooled commands dropped at random
	}
	if cycle > want[0] || renew > want[1] || locker > want[2] {
		t.Fatalf("allocations: backend Acquire+Release %v, Renew %v, Locker Acquire+Release %v; want at most %v", cycle, renew, locker, want)
	}
}

// minAllocs is the least of 3 testing.AllocsPerRun(100, f): the process's
// background work (a rueidis connection dialled meanwhile allocates
// thousands of objects) only adds to a count.
func minAllocs(f func()) float64 {
	n := testing.AllocsPerRun(100, f)
	for range 2 {
		n = min(n, testing.AllocsPerRun(100, f))
	}
	return n
}

// TestGrantKeysChecked: the keys a Grant carries are used only by the
// backend that made them and for the Grant's own Key: a Grant moved to
// another backend (another KeyPrefix) or given another Key is renewed and
// released on the keys of that backend and Key.
func TestGrantKeysChecked(t *testing.T) {
	srv := testserver.StartRedis(t)
	a, c := newBackend(t, srv, Options{KeyPrefix: "a:"})
	b, _ := newBackend(t, srv, Options{KeyPrefix: "b:"})
	ctx := t.Context()
	g := acquire(t, a, "k", 10*time.Second)
	if _, err := b.Renew(ctx, g, 10*time.Second); !isNotHeld(err) {
		t.Fatalf("renew on another prefix of a Grant with a's keys: %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, g); !isNotHeld(err) {
		t.Fatalf("release on another prefix of a Grant with a's keys: %v, want ErrNotHeld", err)
	}
	other := g
	other.Key = "other"
	if err := a.Release(ctx, other); !isNotHeld(err) {
		t.Fatalf("release of key %q with the keys of %q: %v, want ErrNotHeld", other.Key, g.Key, err)
	}
	if got := str(t, c, "GET", a.LockKey("k")); got != g.Owner {
		t.Fatal("the lock was deleted through a Grant of another backend or key")
	}
	bare := driver.Grant{Key: g.Key, Owner: g.Owner} // the Locker's clean-up: no Data
	if err := a.Release(ctx, bare); err != nil {
		t.Fatalf("release of a Grant of Key and Owner only: %v", err)
	}
}

// TestUncontendedCycleCommands pins what one uncontended Acquire and
// Release cost the server (INFO commandstats, commands run inside scripts
// included; SLOWLOG for what each EVALSHA carries), the hot path every
// command and argument of which is server time: acquire.lua checks the
// abandoned set and the queue with one EXISTS (no SHA-1 of the owner
// unless the set exists), release.lua gets the lock, the queue and the fence counter and
// the owner alone (not the abandoned set and two empty arguments).
func TestUncontendedCycleCommands(t *testing.T) {
	b, c := startBackend(t)
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
	got := opStats(t, c)
	// acquire.lua: EVALSHA, EXISTS of the abandoned set and the queue (one
	// command), SET NX PX, INCR, PTTL fence; release.lua: EVALSHA, EXISTS
	// queue, GET, PUBLISH, DEL.
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
		redisscript.AcquireSHA: fmt.Sprint([]string{"EVALSHA", redisscript.AcquireSHA, "4", lk, lk + redisnames.FenceSuffix, lk + redisnames.AbandonedSuffix, lk + redisnames.QueueSuffix, req.Owner, "10000"}),
		redisscript.ReleaseSHA: fmt.Sprint([]string{"EVALSHA", redisscript.ReleaseSHA, "3", lk, lk + redisnames.QueueSuffix, lk + redisnames.FenceSuffix, req.Owner}),
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
// acquire.lua reads the set only while it exists (one EXISTS of the set
// and the queue first; then an EXISTS of the queue tells which one
// exists), and then still refuses nothing but the abandoned owner, and a key of another type
// in its place as corrupt, with nothing written.
func TestAcquireAbandonedSetChecked(t *testing.T) {
	b, c := startBackend(t)
	ctx := context.Background()
	lk := b.LockKey("abandoned-set")
	if err := b.Release(ctx, acquire(t, b, "warm-up", 10*time.Second)); err != nil { // loads the scripts
		t.Fatal(err)
	}
	// Another owner was cleaned up recently: the set exists.
	do(t, c, "SADD", lk+redisnames.AbandonedSuffix, "0000000000000000000000000000000000000000")
	do(t, c, "PEXPIRE", lk+redisnames.AbandonedSuffix, "60000")
	do(t, c, "CONFIG", "RESETSTAT")
	g := acquire(t, b, "abandoned-set", 10*time.Second)
	got := opStats(t, c)
	want := map[string]int64{"evalsha": 1, "exists": 2, "sismember": 1, "set": 1, "incr": 1, "pttl": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("acquire with an abandoned set ran %v, want %v", got, want)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}

	// A key of another type where the set should be.
	wk := b.LockKey("abandoned-wrongtype")
	do(t, c, "SET", wk+redisnames.AbandonedSuffix, "not a set")
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "abandoned-wrongtype", Owner: owner(), TTL: 10 * time.Second})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("acquire with a string as the abandoned set: %v, want ErrCorrupt", err)
	}
	if n := num(t, c, "EXISTS", wk, wk+redisnames.FenceSuffix); n != 0 {
		t.Errorf("the refused acquire wrote %d keys", n)
	}
}

// TestLockerFairUncontendedAllocs: an uncontended Locker.Acquire+Release
// on the Backend (whose waiters queue) allocates no more than a
// Locker.TryAcquire+Release, one attempt (real redis-server): the Locker
// tries once on the caller's context before it sets up a wait (TryFirst).
// Before TryFirst: 20 allocations against 13.
func TestLockerFairUncontendedAllocs(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	b, _ := newBackend(t, srv, Options{})
	l := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
	defer l.Close()
	allocs := func(key string, acquire func(context.Context, string, ...fencedlock.LeaseOption) (*fencedlock.Lease, error)) float64 {
		return minAllocs(func() {
			ls, err := acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	try := allocs("try", l.TryAcquire)
	wait := allocs("wait", l.Acquire)
	t.Logf("allocations per uncontended Locker.Acquire+Release: %v; TryAcquire+Release: %v", wait, try)
	slack := 0.0
	if raceEnabled {
		slack = 1 // pooled commands dropped at random: the floors of two averages
	}
	if wait > try+slack {
		t.Fatalf("%v allocations per uncontended Locker.Acquire+Release, want at most TryAcquire's %v", wait, try)
	}
}

// TestLockerFairHeldAttemptsOnce: a Locker.Acquire on a FairBackend that
// finds the key held makes one plain attempt (acquire.lua's SET NX), then
// queues (wait.lua) without repeating it, and is handed the lock by the
// holder's release: 2 SETs in all (the attempt's, refused, and the
// hand-off's), 3 if AcquireWait repeated the attempt.
func TestLockerFairHeldAttemptsOnce(t *testing.T) {
	srv := testserver.StartRedis(t)
	b, c := newBackend(t, srv, Options{})
	fb, _ := newBackend(t, srv, Options{})
	f := fb
	l := mustLocker(t, f, fencedlock.Options{TTL: 10 * time.Second})
	defer l.Close()
	ctx := t.Context()
	holder := acquire(t, b, "k", 10*time.Second)
	do(t, c, "CONFIG", "RESETSTAT")
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctx, "k")
		if err == nil {
			if ls.Fence() != holder.Fence+1 {
				t.Errorf("waiter granted fence %d, want %d", ls.Fence(), holder.Fence+1)
			}
			err = ls.Release(ctx)
		}
		got <- err
	}()
	queue := fairKeys(b, "k")[3]
	waitFor(t, 10*time.Second, "the waiter to queue", func() bool { return num(t, c, "LLEN", queue) == 1 })
	if err := b.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := commandStats(t, c)["set"]; n != 2 {
		t.Fatalf("%d SETs for one queued acquisition, want 2 (one attempt, one hand-off)", n)
	}
}

// TestAcquireArrivingAfterItsCleanup: the Locker cleans up after an
// Acquire whose outcome is unknown (its context ended while the request was
// in flight) with a Release of Grant{Key, Owner}. rueidis returns on the
// context but still writes a queued request, so the server may run that
// Acquire after the clean-up: it must then take nothing, or the key stays
// held for a whole TTL by a token nobody has. Modelled on a real server by
// sending the two in that order; other owners are not affected.
func TestAcquireArrivingAfterItsCleanup(t *testing.T) {
	srv := testserver.StartRedis(t)
	{
		b, c := newBackend(t, srv, Options{})
		ctx := context.Background()
		key := "late"
		abandoned := owner()
		if err := b.Release(ctx, driver.Grant{Key: key, Owner: abandoned}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("clean-up Release of a free key: %v, want ErrNotHeld", err)
		}
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: abandoned, TTL: time.Minute})
		if err == nil {
			t.Fatalf("an Acquire arriving after its owner's clean-up took the key (TTL %d ms left)", num(t, c, "PTTL", b.LockKey(key)))
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("late Acquire: %v, want ErrNotAcquired", err)
		}
		if n := num(t, c, "EXISTS", b.LockKey(key)); n != 0 {
			t.Fatalf("lock key exists after the refused late Acquire")
		}
		// The clean-up also wins over an Acquire that was applied first
		// and one of the same owner's attempts still in flight.
		twice := owner()
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: twice, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, driver.Grant{Key: key, Owner: twice}); err != nil {
			t.Fatalf("clean-up Release of an applied Acquire: %v", err)
		}
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: twice, TTL: time.Minute}); err == nil {
			t.Fatal("a second in-flight attempt of a cleaned-up owner took the key")
		}
		// Another owner takes the key as usual, with a greater fence.
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: time.Minute})
		if err != nil {
			t.Fatalf("another owner after the clean-ups: %v", err)
		}
		if err := b.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		// The record of abandoned owners expires on its own.
		if ttl := num(t, c, "PTTL", b.LockKey(key)+redisnames.AbandonedSuffix); ttl <= 0 || ttl > redisscript.AbandonTTL.Milliseconds() {
			t.Fatalf("abandoned-owner record PTTL %d ms, want in (0, %d]", ttl, redisscript.AbandonTTL.Milliseconds())
		}
		do(t, c, "DEL", b.LockKey(key)+redisnames.AbandonedSuffix)
	}
}
