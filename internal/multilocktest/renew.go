package multilocktest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// LostKeyRenewExtendsNone: a renewal of a set one of whose keys is gone
// fails naming that key and changes nothing: the keys still held keep the
// expiry of the last successful renewal (here: the grant), as the
// MultiLocker contract says ("extends none"), so that they are free at
// most one TTL after it. It calls the backend's MultiLocker directly: the
// Locker's watchdog would renew on its own timer.
//
// Run does not call it: the etcd backend fails it (its RenewMulti sends
// the lease's keepalive before it reads the entries, so the keys still
// held were extended by a whole TTL; see docs/multilock.md). Package
// multilock runs it on memory and both Redis clients.
func LostKeyRenewExtendsNone(t *testing.T, s Setup) {
	b := s.New(t)
	ctx := context.Background()
	ks := keys(t, 3)
	const ttl = 5 * time.Second // etcd's leases count whole seconds
	sent := time.Now()
	g, err := b.AcquireMulti(ctx, driver.MultiRequest{Keys: ks, Owner: rand.Text(), TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseMulti(ctx, g)
	time.Sleep(g.TTL / 2)
	s.Delete(t, ks[1])
	_, err = b.RenewMulti(ctx, g, g.TTL)
	var lk *driver.LostKeyError
	if !errors.Is(err, driver.ErrNotHeld) || !errors.As(err, &lk) || lk.Key != ks[1] {
		t.Fatalf("RenewMulti with %q gone: %v, want a LostKeyError naming it", ks[1], err)
	}
	for _, k := range []string{ks[0], ks[2]} {
		info, err := b.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		// What is left of the grant's lease, plus 1s: etcd reports whole
		// seconds, rounded up.
		left := g.TTL - time.Since(sent) + time.Second
		if !info.Held || info.TTL > left {
			t.Errorf("%q after the refused renewal: held %v, %v left; want held, at most %v left (not extended)", k, info.Held, info.TTL, left)
		}
	}
}
