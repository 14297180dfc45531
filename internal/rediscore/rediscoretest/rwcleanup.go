package rediscoretest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// runRWArrivingAfterCleanup: the Locker of a read-write lock cleans up
// after an AcquireRW whose outcome is unknown (its context ended while the
// request was in flight) with a ReleaseRW of Grant{Key, Owner}, as it does
// for a lock. The client may still write the request after the clean-up
// (rueidis writes a queued request whose context ended), so the server may
// run that AcquireRW later: it must then take nothing, or the name is held
// for a whole TTL by an owner nobody has (a reader nobody has keeps every
// writer out). Modelled on a real server by sending the two in that order,
// in both modes; other owners are not affected.
func runRWArrivingAfterCleanup[C any](t *testing.T, a Adapter[C]) {
	b, _ := a.backend(t, a.local(t, testserver.StartRedis(t)))
	rw, ok := b.(driver.RWLocker)
	if !ok {
		t.Fatalf("%T is no driver.RWLocker", b)
	}
	ctx := context.Background()
	req := func(name, owner string, m driver.RWMode) driver.RWRequest {
		return driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: name, Owner: owner, TTL: time.Minute}, Mode: m}
	}
	for _, m := range []driver.RWMode{driver.Read, driver.Write} {
		t.Run(m.String(), func(t *testing.T) {
			name := "late-" + m.String()
			gone := rand.Text()
			if err := rw.ReleaseRW(ctx, driver.Grant{Key: name, Owner: gone}, m); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("clean-up ReleaseRW of a free name: %v, want ErrNotHeld", err)
			}
			_, err := rw.AcquireRW(ctx, req(name, gone, m))
			if err == nil {
				t.Fatalf("a %s AcquireRW arriving after its owner's clean-up took the name", m)
			}
			if !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("late %s AcquireRW: %v, want ErrNotAcquired", m, err)
			}
			// The clean-up also wins over an AcquireRW that was applied
			// first and one of the same owner's attempts still in flight.
			twice := rand.Text()
			if _, err := rw.AcquireRW(ctx, req(name, twice, m)); err != nil {
				t.Fatal(err)
			}
			if err := rw.ReleaseRW(ctx, driver.Grant{Key: name, Owner: twice}, m); err != nil {
				t.Fatalf("clean-up ReleaseRW of an applied AcquireRW: %v", err)
			}
			if _, err := rw.AcquireRW(ctx, req(name, twice, m)); err == nil {
				t.Fatalf("a second in-flight %s attempt of a cleaned-up owner took the name", m)
			}
			// Nothing was left: a writer of another owner takes the name
			// at once (it would be refused beside any reader or writer).
			g, err := rw.AcquireRW(ctx, req(name, rand.Text(), driver.Write))
			if err != nil {
				t.Fatalf("another owner's writer after the clean-ups: %v", err)
			}
			if err := rw.ReleaseRW(ctx, g, driver.Write); err != nil {
				t.Fatal(err)
			}
		})
	}
}
