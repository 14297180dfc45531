//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/rwinspecttest"
)

// TestInspectReadWriteRedis, against a real redis-server (the CLI's
// client, rueidis): inspect and list show two `run --read` holders and a
// waiting `run --write`, then the writer, with holder ids and fences as
// the commands saw them, and never an owner token the server holds.
func TestInspectReadWriteRedis(t *testing.T) {
	srv, url := redisServer(t)
	c := srv.Client(t, nil)
	secrets := func(t *testing.T, key string) []string {
		ctx := context.Background()
		lk := lockKey(key)
		tokens, err := c.Do(ctx, c.B().Zrange().Key(lk+redisnames.RWReadersSuffix).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.Do(ctx, c.B().Get().Key(lk+redisnames.RWWriterSuffix).Build()).ToString()
		if err == nil {
			tokens = append(tokens, w)
		} else if !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return tokens
	}
	rwinspecttest.Run(t, rwinspecttest.Setup{Bin: &bin, Env: []string{"FENCEDLOCK_REDIS=" + url}, Secrets: secrets, KeepsFence: true}, "cfg")
}

// TestInspectKinds: inspect KEY says which of the lock KEY and the
// read-write lock KEY exist, and exits 0 if either is held (memory).
func TestInspectKinds(t *testing.T) {
	store := memory.NewStore()
	b := store.Backend()
	defer b.Close()
	ctx := context.Background()
	inspect := func(key string) (int, string, inspectOutput) {
		t.Helper()
		e, out, errb := memEnv(store, nil)
		code := e.main(ctx, []string{"inspect", key})
		text := out.String()
		e, out, _ = memEnv(store, nil)
		e.main(ctx, []string{"inspect", "--json", key})
		var o inspectOutput
		if err := json.Unmarshal([]byte(out.String()), &o); err != nil {
			t.Fatalf("inspect --json %s: %v: %q; stderr:\n%s", key, err, out, errb)
		}
		return code, text, o
	}
	if code, text, o := inspect("k"); code != exitFailure || o.Kind != "none" || o.RW != nil || !strings.Contains(text, "kind:    none taken yet") {
		t.Errorf("nothing taken: exit %d, %+v:\n%s", code, o, text)
	}
	g, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: "lock-owner", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	code, text, o := inspect("k")
	if code != exitOK || o.Kind != "lock" || o.RW != nil || !strings.Contains(text, "kind:    a lock; no read-write lock") || strings.Contains(text, "read-write lock \"k\":") {
		t.Errorf("the lock alone: exit %d, %+v:\n%s", code, o, text)
	}
	if _, err := b.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: "k", Owner: "reader", TTL: time.Minute}, Mode: driver.Read}); err != nil {
		t.Fatal(err)
	}
	code, text, o = inspect("k")
	if code != exitOK || o.Kind != "lock+rwlock" || !o.Held || o.RW == nil || o.RW.Mode != "read" || len(o.RW.Readers) != 1 ||
		!strings.Contains(text, "kind:    a lock and a read-write lock") || !strings.Contains(text, "lock \"k\":\nheld:    yes") || !strings.Contains(text, "held:    read (1 reader)") {
		t.Errorf("both: exit %d, %+v:\n%s", code, o, text)
	}
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	// The lock free, the read-write lock held: held (exit 0), the lock's
	// state still shown (its last fence).
	code, text, o = inspect("k")
	if code != exitOK || o.Kind != "lock+rwlock" || o.Held || !o.RW.Held || !strings.Contains(text, "lock \"k\":\nheld:    no") {
		t.Errorf("the lock free, a reader: exit %d, %+v:\n%s", code, o, text)
	}
}
