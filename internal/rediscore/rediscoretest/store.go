// Package rediscoretest holds the test bodies of the Redis core that both
// adapters run (backend/redis on rueidis, backend/goredis on go-redis),
// each with its own constructor: one body per promise, run on both
// clients against a real redis-server.
package rediscoretest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
)

// Fixture is what a store test needs of an adapter: its Store and a way
// to send a raw command (to set up a key of the wrong type, or to read
// what the store wrote without going through it).
type Fixture struct {
	Store *rediscore.Store
	// Do sends args (command, key, further arguments) as one command and
	// returns its reply as text: a string as it is, an integer in decimal,
	// "" for any other reply.
	Do func(ctx context.Context, args ...string) (string, error)
}

// runStore runs the promises of [fencing.Store] on the Store that
// newFixture makes: one fixture per subtest, each on keys of its own.
func runStore(t *testing.T, newFixture func(t *testing.T) Fixture) {
	tests := []struct {
		name string
		run  func(*testing.T, Fixture, string)
	}{
		{"SetGet", testSetGet},
		{"StaleRejected", testStale},
		{"ZeroToken", testZeroToken},
		{"UpdateRetriesAfterInterveningWrite", testUpdateRetry},
		{"UpdateRetriesAfterInterveningCreate", testUpdateRetryAbsent},
		{"UpdateStaleAfterInterveningNewerToken", testUpdateStaleInBetween},
		{"UpdateFnErrorWritesNothing", testUpdateFnError},
		{"UpdateConcurrentIncrements", testUpdateConcurrent},
		{"WrongTypeKey", testWrongType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.run(t, f, "store/"+strings.ReplaceAll(t.Name(), "/", ":"))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// get reads key through the store and fails the test on error.
func get(t *testing.T, f Fixture, key string) fencing.Record {
	t.Helper()
	r, err := f.Store.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

// set writes value under token from holder to key through the store and
// fails the test on error.
func set(t *testing.T, f Fixture, key, value string, token fencing.Token, holder string) {
	t.Helper()
	if err := f.Store.Set(ctxT(t), key, value, token, holder); err != nil {
		t.Fatalf("Set(%q, %q, %d, %q): %v", key, value, token, holder, err)
	}
}

// want fails the test unless r is the record want.
func want(t *testing.T, what string, r, want fencing.Record) {
	t.Helper()
	if r != want {
		t.Fatalf("%s: record %+v, want %+v", what, r, want)
	}
}

// wantStale fails the test unless err wraps a *fencing.StaleError of token
// from holder against accepted from acceptedFrom.
func wantStale(t *testing.T, err error, token fencing.Token, holder string, accepted fencing.Token, acceptedFrom string) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("got %v, want a *fencing.StaleError", err)
	}
	w := fencing.StaleError{Token: token, Holder: holder, Accepted: accepted, AcceptedFrom: acceptedFrom}
	if *se != w {
		t.Fatalf("StaleError %+v, want %+v", *se, w)
	}
}

func testSetGet(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	want(t, "never written", get(t, f, key), fencing.Record{})
	set(t, f, key, "a", 5, "h1")
	want(t, "after Set", get(t, f, key), fencing.Record{Value: "a", Found: true, Fence: 5, Holder: "h1"})
	if err := f.Store.Set(ctx, key, "b", 5, "h1"); err != nil {
		t.Fatalf("the same token from the same holder: %v", err)
	}
	if err := f.Store.Set(ctx, key, "c", 6, "h2"); err != nil {
		t.Fatalf("a greater token: %v", err)
	}
	want(t, "after a greater token", get(t, f, key), fencing.Record{Value: "c", Found: true, Fence: 6, Holder: "h2"})
}

func testStale(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	set(t, f, key, "a", 5, "h1")
	wantStale(t, f.Store.Set(ctx, key, "old", 4, "h2"), 4, "h2", 5, "h1")
	wantStale(t, f.Store.Set(ctx, key, "same", 5, "h2"), 5, "h2", 5, "h1")
	calls := 0
	err := f.Store.Update(ctx, key, 4, "h2", func(fencing.Record) (string, error) { calls++; return "upd", nil })
	wantStale(t, err, 4, "h2", 5, "h1")
	if calls != 0 {
		t.Fatalf("Update called fn %d times with a token the fence record already rejects", calls)
	}
	want(t, "after rejected writes", get(t, f, key), fencing.Record{Value: "a", Found: true, Fence: 5, Holder: "h1"})
}

func testZeroToken(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	if err := f.Store.Set(ctx, key, "a", 0, "h1"); !errors.Is(err, fencing.ErrInvalidToken) {
		t.Fatalf("Set with token 0: %v, want fencing.ErrInvalidToken", err)
	}
	calls := 0
	err := f.Store.Update(ctx, key, 0, "h1", func(fencing.Record) (string, error) { calls++; return "a", nil })
	if !errors.Is(err, fencing.ErrInvalidToken) || calls != 0 {
		t.Fatalf("Update with token 0: %v after %d calls of fn, want fencing.ErrInvalidToken and none", err, calls)
	}
	want(t, "after token 0", get(t, f, key), fencing.Record{})
}

// testUpdateRetry: another write lands between Update's read and its
// write (fn makes it, on its first call); Update must not overwrite it
// with a result computed from the stale read, but read again.
func testUpdateRetry(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	set(t, f, key, "1", 5, "h1")
	var seen []string
	err := f.Store.Update(ctx, key, 5, "h1", func(cur fencing.Record) (string, error) {
		seen = append(seen, cur.Value)
		if len(seen) == 1 {
			if err := f.Store.Set(ctx, key, "100", 5, "h1"); err != nil {
				return "", err
			}
		}
		n, err := strconv.Atoi(cur.Value)
		return strconv.Itoa(n + 1), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "1,100" {
		t.Fatalf("fn saw %q, want a second call after the intervening write: 1,100", seen)
	}
	want(t, "after Update", get(t, f, key), fencing.Record{Value: "101", Found: true, Fence: 5, Holder: "h1"})
}

// testUpdateRetryAbsent: Update read no value, and a value was created in
// between: the absence read is no longer there either.
func testUpdateRetryAbsent(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	var seen []fencing.Record
	err := f.Store.Update(ctx, key, 7, "h1", func(cur fencing.Record) (string, error) {
		seen = append(seen, cur)
		if len(seen) == 1 {
			if err := f.Store.Set(ctx, key, "created", 7, "h1"); err != nil {
				return "", err
			}
		}
		return cur.Value + "+", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Found || seen[1].Value != "created" {
		t.Fatalf("fn saw %+v, want an absent value then \"created\"", seen)
	}
	want(t, "after Update", get(t, f, key), fencing.Record{Value: "created+", Found: true, Fence: 7, Holder: "h1"})
}

// testUpdateStaleInBetween: a newer token writes between the read and the
// write: the script's guard rejects Update's write, fn is not called again.
func testUpdateStaleInBetween(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	set(t, f, key, "a", 5, "h1")
	calls := 0
	err := f.Store.Update(ctx, key, 5, "h1", func(fencing.Record) (string, error) {
		calls++
		if err := f.Store.Set(ctx, key, "newer", 9, "h2"); err != nil {
			return "", err
		}
		return "mine", nil
	})
	wantStale(t, err, 5, "h1", 9, "h2")
	if calls != 1 {
		t.Fatalf("fn called %d times, want 1", calls)
	}
	want(t, "after the rejected Update", get(t, f, key), fencing.Record{Value: "newer", Found: true, Fence: 9, Holder: "h2"})
}

func testUpdateFnError(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	boom := errors.New("boom")
	err := f.Store.Update(ctx, key, 3, "h1", func(fencing.Record) (string, error) { return "x", boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want fn's error", err)
	}
	want(t, "fn failed on a new key", get(t, f, key), fencing.Record{})
	set(t, f, key, "a", 3, "h1")
	err = f.Store.Update(ctx, key, 4, "h2", func(fencing.Record) (string, error) { return "x", boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v, want fn's error", err)
	}
	want(t, "fn failed: no value and no fence advance", get(t, f, key), fencing.Record{Value: "a", Found: true, Fence: 3, Holder: "h1"})
}

// testUpdateConcurrent: writers of one token and holder increment one
// counter with Update at the same time; the read-modify-write loses none.
func testUpdateConcurrent(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	var failed atomic.Value
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := f.Store.Update(ctx, key, 11, "h1", func(cur fencing.Record) (string, error) {
					n := 0
					if cur.Found {
						var err error
						if n, err = strconv.Atoi(cur.Value); err != nil {
							return "", err
						}
					}
					return strconv.Itoa(n + 1), nil
				})
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	want(t, "after the increments", get(t, f, key), fencing.Record{Value: strconv.Itoa(writers * each), Found: true, Fence: 11, Holder: "h1"})
}

func testWrongType(t *testing.T, f Fixture, key string) {
	ctx := ctxT(t)
	if _, err := f.Do(ctx, "SET", key, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Store.Get(ctx, key); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Get of a string key: %v, want WRONGTYPE", err)
	}
	if err := f.Store.Set(ctx, key, "a", 5, "h1"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Set of a string key: %v, want WRONGTYPE", err)
	}
	calls := 0
	err := f.Store.Update(ctx, key, 5, "h1", func(fencing.Record) (string, error) { calls++; return "a", nil })
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || calls != 0 {
		t.Fatalf("Update of a string key: %v after %d calls of fn, want WRONGTYPE and none", err, calls)
	}
	if v, err := f.Do(ctx, "GET", key); err != nil || v != "plain" {
		t.Fatalf("the string key after the refused writes: %q, %v; want \"plain\"", v, err)
	}
}
