package postgres_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/fencing"
)

// TestKeys: Keys pages through the keys with a prefix in byte order, from
// both tables (a key whose lease row was deleted is still listed from its
// fence row), bytes 0x00 and 0xff included, and nothing outside the prefix.
func TestKeys(t *testing.T) {
	_, admin := server(t)
	b := newBackend(t, admin, postgres.Options{})
	ctx := t.Context()
	for _, k := range []string{"a/1", "a/2", "a/3\x00", "a/\xff\xff", "a\xff", "b/1", "a"} {
		if err := b.Release(ctx, grab(t, b, k, "o")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec(ctx, `DELETE FROM fencedlock_leases WHERE key = 'a/2'`); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for range 10 {
		page, err := b.Keys(ctx, "a/", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page of %d keys, limit 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1]
	}
	want := []string{"a/1", "a/2", "a/3\x00", "a/\xff\xff"}
	if !slices.Equal(got, want) {
		t.Fatalf("Keys(a/) = %q, want %q", got, want)
	}
	all, err := b.Keys(ctx, "", "", 100)
	if err != nil || len(all) != 7 {
		t.Fatalf("Keys(\"\") = %q, %v: want all 7", all, err)
	}
	if ff, err := b.Keys(ctx, "a/\xff", "", 100); err != nil || !slices.Equal(ff, []string{"a/\xff\xff"}) {
		t.Fatalf("Keys(a/\\xff) = %q, %v", ff, err)
	}
}

// TestKVFenceBarrier: a barrier raises the fence record without touching
// the value, creates an absent key, and is refused below the accepted
// fence; after it the old holder's write is refused.
func TestKVFenceBarrier(t *testing.T) {
	_, admin := server(t)
	ctx := t.Context()
	kv := newKV(t, admin, "")
	if err := kv.Set(ctx, "r", "v1", 3, "old"); err != nil {
		t.Fatal(err)
	}
	if err := kv.FenceBarrier(ctx, "r", 4, "operator"); err != nil {
		t.Fatal(err)
	}
	if r, _ := kv.Get(ctx, "r"); r.Value != "v1" || r.Fence != 4 || r.Holder != "operator" {
		t.Fatalf("after the barrier: %+v, want v1 at 4 from operator", r)
	}
	if err := kv.Set(ctx, "r", "late", 3, "old"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("old holder's write after the barrier: %v, want ErrStale", err)
	}
	var se *fencing.StaleError
	if err := kv.FenceBarrier(ctx, "r", 2, "operator"); !errors.As(err, &se) || se.Accepted != 4 {
		t.Fatalf("lower barrier: %v, want a StaleError at 4", err)
	}
	if err := kv.FenceBarrier(ctx, "absent", 7, "operator"); err != nil {
		t.Fatal(err)
	}
	if r, _ := kv.Get(ctx, "absent"); !r.Found || r.Value != "" || r.Fence != 7 {
		t.Fatalf("barrier on an absent key: %+v", r)
	}
}
