package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// TestAcquireArrivingAfterItsCleanup: the Locker cleans up after an
// Acquire whose outcome is unknown (its context ended while the request was
// in flight) with a Release of Grant{Key, Owner}. rueidis returns on the
// context but still writes a queued request, so the server may run that
// Acquire after the clean-up: it must then take nothing, or the key stays
// held for a whole TTL by a token nobody has. Modelled on a real server by
// sending the two in that order; other owners are not affected.
func TestAcquireArrivingAfterItsCleanup(t *testing.T) {
	srv := redistest.Start(t)
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
		if ttl := num(t, c, "PTTL", b.LockKey(key)+abandonedSuffix); ttl <= 0 || ttl > abandonTTL.Milliseconds() {
			t.Fatalf("abandoned-owner record PTTL %d ms, want in (0, %d]", ttl, abandonTTL.Milliseconds())
		}
		do(t, c, "DEL", b.LockKey(key)+abandonedSuffix)
	}
}
