package rwlocktest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// RetriedAcquire: an owner's acquire of a name it already holds in that
// mode, as a client retries a request whose reply was lost, gets its own
// lease back (rwlock.lua: "the owner's own lease again for a retried
// request"): granted, with the same fence and owner, the lease reset to
// the retry's TTL, still one lease (no second reader), the fence counter
// not advanced, and granted although another owner now waits for the name
// (a writer's intent, a refused reader). It registers no intent. One
// release of it frees the name: the waiting writer, or a reader, is
// granted next with a greater fence. A backend that is a
// driver.RWInspector shows each step; the rest holds on any backend.
func RetriedAcquire(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := s.Backend(t)
	in, _ := b.(driver.RWInspector)
	// Neither TTL is reached: the scenario waits for nothing. The retry's
	// is longer, so that a lease reset to it is told from the first.
	const first, retry = 30 * time.Second, 2 * time.Minute
	for _, m := range []driver.RWMode{driver.Read, driver.Write} {
		t.Run(m.String(), func(t *testing.T) {
			n := name("retry-" + m.String())
			acquire := func(owner string, m driver.RWMode, ttl time.Duration) (driver.Grant, error) {
				req := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: n, Owner: owner, TTL: ttl}, Mode: m}
				if m == driver.Write {
					req.Intent = ttl
				}
				return b.AcquireRW(ctx, req)
			}
			inspect := func(why string) driver.RWInfo {
				t.Helper()
				info, err := in.InspectRW(ctx, n)
				if err != nil {
					t.Fatalf("InspectRW %s: %v", why, err)
				}
				return info
			}
			owner, other := "holder-secret-"+rand.Text(), "other-secret-"+rand.Text()
			g, err := acquire(owner, m, first)
			if err != nil {
				t.Fatalf("%v acquire of a free name: %v", m, err)
			}
			// The other mode waits: a writer's intent, or a refused reader.
			if _, err := acquire(other, flip(m), first); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("%v acquire while a %v lease holds: %v, want ErrNotAcquired", flip(m), m, err)
			}
			g2, err := acquire(owner, m, retry)
			if err != nil {
				t.Fatalf("the holder's retried %v acquire (its first reply lost) while another owner waits: %v, want its own lease again", m, err)
			}
			if g2.Key != n || g2.Owner != owner || g2.Fence != g.Fence || g2.TTL <= first {
				t.Fatalf("the holder's retried %v acquire granted key %q, own owner %v, fence %v, TTL %v; want %q, its own, its fence %v, TTL %v",
					m, g2.Key, g2.Owner == owner, g2.Fence, g2.TTL, n, g.Fence, retry)
			}
			intents := 0
			if m == driver.Read {
				intents = 1 // the other's, a writer's
			}
			if in != nil {
				checkRetried(t, inspect("after the retry"), m, owner, g.Fence, intents, first, retry)
			}
			if err := b.ReleaseRW(ctx, g2, m); err != nil {
				t.Fatalf("release of the retried %v lease: %v", m, err)
			}
			if in != nil {
				if info := inspect("after its release"); info.Held() || info.Intents != intents {
					t.Fatalf("after one release of the retried %v lease: %+v; want the name free, %d intent(s)", m, info, intents)
				}
			}
			g3, err := acquire(other, flip(m), first)
			if err != nil {
				t.Fatalf("the waiting %v acquire after one release of the retried %v lease: %v, want it granted", flip(m), m, err)
			}
			if g3.Fence <= g.Fence {
				t.Fatalf("the %v lease after the retried %v lease: fence %v, want above %v", flip(m), m, g3.Fence, g.Fence)
			}
			if err := b.ReleaseRW(ctx, g3, flip(m)); err != nil {
				t.Fatalf("release of the %v lease: %v", flip(m), err)
			}
		})
	}
}

// checkRetried checks what InspectRW shows after the owner's retried m
// acquire: its one lease (no second one), with its fence and the TTL reset
// to the retry's (over first), intents intents, the last fence its own.
func checkRetried(t *testing.T, info driver.RWInfo, m driver.RWMode, owner string, fence fencing.Token, intents int, first, retry time.Duration) {
	t.Helper()
	leases := info.Readers
	if m == driver.Write && info.Writer != nil {
		leases = append(leases, *info.Writer)
	}
	if len(leases) != 1 || (m == driver.Write) != (info.Writer != nil) || info.Intents != intents ||
		(info.Fence != 0 && info.Fence != fence) {
		t.Fatalf("after the holder's retried %v acquire: %+v; want its one %v lease, %d intent(s), last fence %v",
			m, info, m, intents, fence)
	}
	if l := leases[0]; l.Holder != driver.HolderID(owner) || l.Fence != fence || l.TTL <= first {
		t.Fatalf("after the holder's retried %v acquire: lease %+v; want holder %s, fence %v, TTL reset to %v (over %v)",
			m, l, driver.HolderID(owner), fence, retry, first)
	}
}

// flip returns the other mode.
func flip(m driver.RWMode) driver.RWMode {
	if m == driver.Read {
		return driver.Write
	}
	return driver.Read
}
