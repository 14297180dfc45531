package rediscore

import (
	"context"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Sets of keys ([driver.MultiLocker]): each key of a set is the lock of
// Acquire (the same lock key, owner token and fence counter), taken,
// renewed and released for the whole set by one script
// (multi_acquire.lua, multi_renew.lua, multi_release.lua), so a set and a
// single-key lease exclude each other and share each key's fences.

var (
	multiAcquireScript = NewScript(redisscript.MultiAcquireLua)
	multiRenewScript   = NewScript(redisscript.MultiRenewLua)
	multiReleaseScript = NewScript(redisscript.MultiReleaseLua)
)

// ClusterConn is implemented by a [Conn] that can say whether its client
// talks to a Redis Cluster: a script there runs only on keys of one hash
// slot, so a set of keys in several slots is refused before it is sent.
type ClusterConn interface {
	Cluster() bool
}

// RingConn is implemented by a [Conn] that can say whether its client
// shards keys itself by their hash tag (a go-redis Ring): a script runs
// on the shard of its first key, and the Ring moves keys between shards
// as shards come and go. Every key's lock has a hash tag of its own (the
// key; KeyPrefix holds no braces), so no two keys are sure to stay on one
// shard: a set of more than one key is refused before it is sent.
type RingConn interface {
	Ring() bool
}

// multiOp starts op on the set keys: it returns their lock keys, or an
// error for a closed backend or, on Redis Cluster, keys in more than one
// hash slot, or, on a client-sharded Ring, more than one key.
func (b *Backend) multiOp(op string, keys []string) ([]string, error) {
	name := fmt.Sprintf("%q", keys)
	if b.c.Closed() {
		return nil, redisscript.ErrClosed(op, name)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("redis: %s: empty set of keys: %w", op, driver.ErrInvalid)
	}
	locks := make([]string, len(keys))
	for i, k := range keys {
		locks[i] = redisscript.LockKey(b.opts.KeyPrefix, k)
	}
	if rc, ok := b.c.(RingConn); ok && rc.Ring() && len(keys) > 1 {
		return nil, fmt.Errorf("redis: %s %s: a client-sharded Ring may keep %q and %q on different shards (a set there is one key): %w",
			op, name, keys[0], keys[1], driver.ErrInvalid)
	}
	if cc, ok := b.c.(ClusterConn); ok && cc.Cluster() {
		for i := range locks {
			if HashSlot(locks[i]) != HashSlot(locks[0]) {
				return nil, fmt.Errorf("redis: %s %s: keys %q and %q are in different Cluster hash slots (a set must be in one slot): %w",
					op, name, keys[0], keys[i], driver.ErrInvalid)
			}
		}
	}
	return locks, nil
}

// evalSet runs s with c for op on the set name, followed by WAIT with
// WaitReplicas; wrote says whether the script's reply is a write. A write
// that WAIT did not confirm (too few replicas, or WAIT's error) returns
// unconfirmed true with the error, as Acquire and Renew report theirs.
func (b *Backend) evalSet(ctx context.Context, op, name string, s *Script, c *Call, wrote func(Waited) bool) (w Waited, unconfirmed bool, err error) {
	if b.opts.WaitReplicas == 0 {
		w.N, w.Vals, err = b.c.EvalInts(ctx, s, c)
		if err != nil {
			return w, false, b.c.Wrap(op, name, err)
		}
		return w, false, nil
	}
	if w, err = b.c.EvalIntsWait(ctx, s, c, b.opts.WaitReplicas, b.opts.WaitTimeout); err != nil {
		return w, false, b.c.Wrap(op, name, err)
	}
	switch {
	case !wrote(w):
		return w, false, nil
	case w.WaitErr != nil:
		return w, true, b.c.Wrap(op, name, w.WaitErr)
	case w.Acked < int64(b.opts.WaitReplicas):
		return w, true, b.opts.NotReplicated(op, name, w.Acked, nil)
	}
	return w, false, nil
}

// AcquireMulti takes every key of req.Keys, or none (multi_acquire.lua),
// followed by WAIT with WaitReplicas: a set not confirmed by enough
// replicas is released again, and the error wraps ErrReplication (or is
// WAIT's). A *driver.HeldError names the first key held by another owner.
func (b *Backend) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	const op = "acquire set"
	locks, err := b.multiOp(op, req.Keys)
	if err != nil {
		return driver.MultiGrant{}, err
	}
	n := len(locks)
	keys := make([]string, 0, 2*n+1)
	keys = append(keys, locks...)
	for _, l := range locks {
		keys = append(keys, l+redisnames.FenceSuffix)
	}
	keys = append(keys, locks[0]+redisnames.AbandonedSuffix)
	ttl := b.ttl.Get(req.TTL)
	name := fmt.Sprintf("%q", req.Keys)
	granted := func(w Waited) bool { return len(w.Vals) == n+1 && w.Vals[0] == 1 }
	w, unconfirmed, err := b.evalSet(ctx, op, name, multiAcquireScript, &Call{Keys: keys, Args: []string{req.Owner, ttl.S}}, granted)
	if unconfirmed {
		// Taken on the primary but not confirmed: released again, so that
		// no key of the set stays held. The reply came back, nothing of
		// this attempt is in flight: the release carries the fences and
		// is not a clean-up (a MultiGrant without Fences), which would
		// refuse the owner's next attempts for AbandonTTL.
		fences := make([]fencing.Token, n)
		for i := range fences {
			fences[i] = fencing.Token(w.Vals[i+1])
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
		if rerr := b.ReleaseMulti(rctx, driver.MultiGrant{Keys: req.Keys, Owner: req.Owner, Fences: fences}); rerr != nil {
			err = fmt.Errorf("%w; releasing it again failed: %w", err, rerr)
		}
		cancel()
	}
	if err != nil {
		return driver.MultiGrant{}, err
	}
	vals := w.Vals
	switch {
	case len(vals) == 3 && vals[0] == 0 && vals[1] >= 1 && vals[1] <= int64(n):
		return driver.MultiGrant{}, redisscript.Held(req.Keys[vals[1]-1], -vals[2])
	case len(vals) != n+1 || vals[0] != 1:
		return driver.MultiGrant{}, fmt.Errorf("redis: %s %q: unexpected reply %v", op, req.Keys, vals)
	}
	fences := make([]fencing.Token, n)
	for i, v := range vals[1:] {
		fences[i] = fencing.Token(v)
	}
	return driver.MultiGrant{Keys: req.Keys, Owner: req.Owner, Fences: fences, TTL: ttl.Duration()}, nil
}

// RenewMulti extends every key of g to ttl if g.Owner holds them all
// (multi_renew.lua), followed by WAIT with WaitReplicas (a renewal not
// confirmed is an error wrapping ErrReplication, or WAIT's, as Renew's);
// otherwise a *driver.LostKeyError names the first key it does not hold,
// and nothing changed; if that key holds a value fencedlock did not write
// (another type, a string without a TTL), the error also wraps ErrCorrupt
// and driver.ErrPermanent (redisscript.LostKey).
func (b *Backend) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	const op = "renew set"
	locks, err := b.multiOp(op, g.Keys)
	if err != nil {
		return 0, err
	}
	a := b.ttl.Get(ttl)
	renewed := func(w Waited) bool { return w.Vals == nil && w.N == 0 }
	w, _, err := b.evalSet(ctx, op, fmt.Sprintf("%q", g.Keys), multiRenewScript, &Call{Keys: locks, Args: []string{g.Owner, a.S}}, renewed)
	if err != nil {
		return 0, err
	}
	if err := redisscript.LostKey(op, g.Keys, w.N); err != nil {
		return 0, err
	}
	return a.Duration(), nil
}

// ReleaseMulti deletes the keys of g that g.Owner holds and wakes their
// waiters (multi_release.lua); a *driver.LostKeyError names the first key
// it did not hold, wrapping ErrCorrupt and driver.ErrPermanent too if that
// key holds a value fencedlock did not write, which is left as it is. A
// MultiGrant without Fences (the Locker's clean-up after an acquire whose
// outcome is unknown) also makes the server remember the owner for
// redisscript.AbandonTTL, so that its acquire takes nothing if it arrives
// later.
func (b *Backend) ReleaseMulti(ctx context.Context, g driver.MultiGrant) error {
	const op = "release set"
	locks, err := b.multiOp(op, g.Keys)
	if err != nil {
		return err
	}
	args := []string{g.Owner, ""}
	if b.opts.ShardedPubSub {
		args[1] = "sharded"
	}
	if g.Fences == nil {
		locks = append(locks, locks[0]+redisnames.AbandonedSuffix)
		args = append(args, redisscript.AbandonTTLms)
	}
	n, _, err := b.c.EvalInts(ctx, multiReleaseScript, &Call{Keys: locks, Args: args})
	if err != nil {
		return b.c.Wrap(op, fmt.Sprintf("%q", g.Keys), err)
	}
	return redisscript.LostKey(op, g.Keys, n)
}
