package fencedlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
)

// FuzzKeysAndOptions: any key and TTL either is refused with ErrInvalid
// (the options by New, the key by TryAcquire) before reaching the backend, or yields a lease on exactly that key whose
// release frees it; nothing else is ever returned.
func FuzzKeysAndOptions(f *testing.F) {
	f.Add("orders", int64(time.Second), int64(0))
	f.Add("", int64(time.Second), int64(0))
	f.Add("{}/ü\x00 ", int64(fencedlock.MinTTL), int64(time.Millisecond))
	f.Add("k", int64(-1), int64(0))
	f.Add("k", int64(time.Second), int64(time.Second))
	f.Fuzz(func(t *testing.T, key string, ttl, renew int64) {
		store := memory.NewStore()
		l, err := fencedlock.New(store.Backend(), fencedlock.Options{
			TTL: time.Duration(ttl), RenewInterval: time.Duration(renew), ManualRenew: true,
		})
		// The same values as per-call options are valid exactly when New
		// accepts them, and are refused before reaching the backend.
		perCall := mustLocker(t, store.Backend(), fencedlock.Options{})
		defer perCall.Close()
		pls, perr := perCall.TryAcquire(t.Context(), "per-call",
			fencedlock.WithTTL(time.Duration(ttl)), fencedlock.WithRenewInterval(time.Duration(renew)), fencedlock.WithManualRenew(true))
		// A grant refused as late (a short TTL on a busy fuzzing machine)
		// was accepted by the options check and then released: the
		// machine's speed, not the options' handling.
		late := errors.Is(perr, fencedlock.ErrLateGrant)
		if late {
			if info, _ := store.Backend().Inspect(t.Context(), "per-call"); info.Held {
				t.Fatalf("late per-call grant still held: %+v", info)
			}
		}
		if (perr == nil || late) != (err == nil) || (perr != nil && !late && !errors.Is(perr, fencedlock.ErrInvalid)) {
			t.Fatalf("ttl %v renew %v: New: %v; per-call TryAcquire: %v", time.Duration(ttl), time.Duration(renew), err, perr)
		}
		if perr == nil {
			if want := time.Duration(ttl); want != 0 && pls.TTL() != want {
				t.Fatalf("per-call lease TTL %v, want %v", pls.TTL(), want)
			}
			_ = pls.Release(t.Context())
		} else if info, _ := store.Backend().Inspect(t.Context(), "per-call"); !late && (info.Held || info.Fence != 0) {
			t.Fatalf("refused per-call request left state: %+v", info)
		}
		if err != nil {
			if !errors.Is(err, fencedlock.ErrInvalid) || l != nil {
				t.Fatalf("ttl %v renew %v: New: %v, %v; want nil, ErrInvalid", time.Duration(ttl), time.Duration(renew), l, err)
			}
			return
		}
		defer l.Close()
		ls, err := l.TryAcquire(t.Context(), key)
		if errors.Is(err, fencedlock.ErrLateGrant) {
			if info, _ := store.Backend().Inspect(t.Context(), key); info.Held {
				t.Fatalf("late grant of %q still held: %+v", key, info)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, fencedlock.ErrInvalid) {
				t.Fatalf("key %q ttl %v: %v is not ErrInvalid", key, time.Duration(ttl), err)
			}
			if info, _ := store.Backend().Inspect(t.Context(), key); info.Held || info.Fence != 0 {
				t.Fatalf("refused request left state: %+v", info)
			}
			return
		}
		if ls.Key() != key || ls.Fence() != 1 {
			t.Fatalf("lease on %q fence %d, want %q fence 1", ls.Key(), ls.Fence(), key)
		}
		if err := ls.Release(t.Context()); err != nil {
			// Only a lease that ran past its local deadline (short TTLs on a
			// busy fuzzing machine) may refuse to release.
			if !errors.Is(err, fencedlock.ErrNotHeld) || !errors.Is(err, fencedlock.ErrLeaseLost) {
				t.Fatal(err)
			}
		}
		if info, _ := store.Backend().Inspect(t.Context(), key); info.Held {
			t.Fatalf("released key still held")
		}
	})
}
