package multilocktest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// ReplacedKeyNamed: a key of a held set that is deleted, taken by another
// owner, or replaced by a value fencedlock did not write (Setup.Corrupt:
// a hash on Redis) makes the set's renewal and its release fail with a
// *driver.LostKeyError naming that key (wrapping ErrNotHeld; for a
// foreign value also ErrPermanent, and Setup.Foreign if set). The renewal
// changes nothing (the keys still held are not extended); the release
// frees the keys the owner still holds and leaves the replacement alone.
// Through a Locker, a foreign value ends the lease and Err names the key.
// A backend with no way to store a foreign value (Setup.Corrupt nil:
// memory, etcd) runs the first two cases only.
func ReplacedKeyNamed(t *testing.T, s Setup) {
	hows := []string{"deleted", "another owner"}
	if s.Corrupt != nil {
		hows = append(hows, "foreign value")
	}
	for _, how := range hows {
		t.Run(how, func(t *testing.T) { replacedRenewRelease(t, s, how) })
	}
	if s.Corrupt != nil {
		t.Run("foreign value ends the lease", func(t *testing.T) { foreignEndsLease(t, s) })
	}
}

// replace replaces key's lock behind its holder's back as how says:
// "deleted", "another owner" (taken by other, whose grant it returns),
// "foreign value".
func replace(t *testing.T, s Setup, other Backend, key, how string) driver.Grant {
	s.Delete(t, key)
	switch how {
	case "another owner":
		g, err := other.Acquire(context.Background(), driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("another owner's acquire of %q: %v", key, err)
		}
		t.Cleanup(func() { other.Release(context.Background(), g) })
		return g
	case "foreign value":
		s.Corrupt(t, key)
	}
	return driver.Grant{}
}

// checkLost fails t unless err is a LostKeyError naming key, wrapping
// ErrNotHeld, and, for a foreign value, ErrPermanent and s.Foreign.
func checkLost(t *testing.T, s Setup, op string, err error, key string, foreign bool) {
	t.Helper()
	var lk *driver.LostKeyError
	if !errors.Is(err, driver.ErrNotHeld) || !errors.As(err, &lk) || lk.Key != key {
		t.Errorf("%s with %q replaced: %v, want a LostKeyError naming it", op, key, err)
	}
	if foreign != errors.Is(err, driver.ErrPermanent) {
		t.Errorf("%s with %q replaced: %v; wraps ErrPermanent: %v, want %v", op, key, err, !foreign, foreign)
	}
	if foreign && s.Foreign != nil && !errors.Is(err, s.Foreign) {
		t.Errorf("%s with %q holding a foreign value: %v, want it to wrap %v", op, key, err, s.Foreign)
	}
}

// replacedRenewRelease runs the renewal and the release of a set whose
// middle key was replaced as how says.
func replacedRenewRelease(t *testing.T, s Setup, how string) {
	b, other := s.New(t), s.New(t)
	ctx := context.Background()
	ks := keys(t, 3)
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	theirs := replace(t, s, other, ks[1], how)
	foreign := how == "foreign value"

	// Asked for 4 TTLs: a key extended would have far more than one left.
	_, err = b.RenewMulti(ctx, g, 4*g.TTL)
	checkLost(t, s, "RenewMulti", err, ks[1], foreign)
	for _, k := range []string{ks[0], ks[2]} {
		info, err := b.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if max := g.TTL + time.Second; !info.Held || info.TTL > max { // etcd rounds up to seconds
			t.Errorf("%q after the refused renewal: held %v, %v left; want held, at most %v left (not extended)", k, info.Held, info.TTL, max)
		}
	}

	checkLost(t, s, "ReleaseMulti", b.ReleaseMulti(ctx, g), ks[1], foreign)
	held(t, b, false, ks[0], ks[2])
	switch how {
	case "another owner":
		held(t, b, true, ks[1])
		if _, err := other.Renew(ctx, theirs, theirs.TTL); err != nil {
			t.Errorf("the other owner's renewal of %q after the set's release: %v, want its lock kept", ks[1], err)
		}
	case "foreign value":
		// Still there, not deleted: Inspect cannot read another type (a
		// permanent error) and sees a string as held.
		if info, err := b.Inspect(ctx, ks[1]); err != nil && !errors.Is(err, driver.ErrPermanent) || err == nil && !info.Held {
			t.Errorf("Inspect %q after the set's release: %+v, %v; want the foreign value kept (held, or a permanent error)", ks[1], info, err)
		}
	}
}

// foreignEndsLease: through a Locker, a key of a held set replaced by a
// foreign value ends the lease at its next renewal; Err and Release name
// the key, and Release frees the others.
func foreignEndsLease(t *testing.T, s Setup) {
	b := s.New(t)
	m := newLocker(t, b)
	ks := keys(t, 3)
	ls, err := m.Acquire(context.Background(), ks, fencedlock.WithTTL(3*time.Second)) // the keys outlive the release's check
	if err != nil {
		t.Fatal(err)
	}
	replace(t, s, nil, ks[2], "foreign value")
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second): // TTL/3 renewals; wide for a loaded machine
		t.Fatal("the lease of a set with a foreign value in a key still holds after 10s")
	}
	err = ls.Err()
	if !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", err)
	}
	checkLost(t, s, "Err", err, ks[2], true)
	err = ls.Release(context.Background())
	if !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Errorf("Release = %v, want ErrLeaseLost", err)
	}
	checkLost(t, s, "Release", err, ks[2], true)
	held(t, b, false, ks[0], ks[1])
}
