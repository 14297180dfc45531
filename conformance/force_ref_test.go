package conformance_test

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// bugForceKeepsFence: ForceRelease deletes the lock without advancing the
// fence counter (a plain DEL, as a force-unlock without fences does) while
// reporting the next fence as consumed: the next holder is granted the
// fence the operator was told no one would get, and a barrier written
// with it would reject the new holder instead of the old one. Its value
// lies outside the iota list of reference_test.go.
const bugForceKeepsFence bug = 1 << 20

func init() {
	addExclusive("ForceReleaseKeepsFence", "ForceReleaser", bugForceKeepsFence) // no other property calls ForceRelease
	// A Renew without owner check keeps a forcibly released lease alive
	// once the waiter holds the key: ForceReleaser reports it too.
	for i := range brokenVariants {
		if brokenVariants[i].name == "RenewWithoutOwnerCheck" {
			brokenVariants[i].want = append(brokenVariants[i].want, "ForceReleaser")
		}
	}
}

// ForceRelease makes the reference backend a driver.ForceReleaser:
// the lock is freed (waiters are granted as on a release) and the fence
// counter advanced past the consumed fence, in one critical section.
func (b *refBackend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	if err := b.usable(ctx); err != nil {
		return driver.ForceResult{}, err
	}
	s, key := b.s, b.s.mangle(key)
	defer b.respond()
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.settle(key, time.Now())
	r := driver.ForceResult{Before: s.fences[key]}
	if l.owner != "" {
		r.Held, r.Holder, r.Before = true, driver.HolderID(l.owner), l.fence
	}
	r.After = s.fences[key] + 1
	if s.bug != bugForceKeepsFence {
		s.fences[key] = r.After
	}
	s.free(key, l)
	return r, nil
}
