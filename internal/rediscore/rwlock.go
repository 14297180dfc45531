package rediscore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Read-write locks ([driver.RWLocker]): one script, rwlock.lua, for every
// step; the writer, the readers (a sorted set scored by expiry, server
// time), the readers' fences, the shared fence counter and the waiting
// writers' intents are keys beside the lock key of the name (same hash
// slot, apart from the plain lock's keys). Releases publish on the lock
// key's release channel, so the adapters' Watch of the name wakes waiters.

// rwScript is rwlock.lua. Again: an acquire repeated grants the owner its
// own lease again, a renew or release repeated finds the same or nothing.
var rwScript = newScript(redisscript.RWLockLua, redisscript.SHA1Hex(redisscript.RWLockLua), true)

// rwCall returns the Call of rwlock.lua on name for op, mode and owner,
// with ttl and intent (acquire, renew) or the release channel.
func (b *Backend) rwCall(name, op string, m driver.RWMode, owner, ttl, intent string) *Call {
	lk := redisscript.LockKey(b.opts.KeyPrefix, name)
	mode := "r"
	if m == driver.Write {
		mode = "w"
	}
	c := &Call{Keys: []string{lk + redisnames.RWWriterSuffix, lk + redisnames.RWReadersSuffix,
		lk + redisnames.RWFencesSuffix, lk + redisnames.RWFenceSuffix, lk + redisnames.RWIntentsSuffix,
		lk + redisnames.RWAbandonedSuffix}}
	c.Args = []string{op, mode, owner, ttl, intent, lk + redisnames.ReleasedSuffix, "", ""}
	if b.opts.ShardedPubSub {
		c.Args[6] = "sharded"
	}
	return c
}

// evalRW runs c, followed by WAIT with WaitReplicas: a positive reply not
// confirmed by enough replicas returns an error wrapping ErrReplication
// with the reply.
func (b *Backend) evalRW(ctx context.Context, op, name string, c *Call) (int64, error) {
	n, acked, err := b.eval(ctx, rwScript, c)
	if err != nil {
		return 0, b.c.Wrap(op, name, err)
	}
	if n > 0 && b.unconfirmed(acked) {
		return n, b.opts.NotReplicated(op, name, acked, nil)
	}
	return n, nil
}

// intentArg is a writer's intent as rwlock.lua takes it (whole
// milliseconds, rounded up; "0" for none), lengthened by WaitTimeout with
// WaitReplicas. The script writes the intent, and the WAIT that follows it
// (on every attempt, a refused one too: it is sent with the script, and
// the script wrote the intent) holds the reply for up to WaitTimeout. The
// intent must last intent past the END of the attempt, or it lapses before
// a writer that still waits can refresh it (with the default options a
// 2.25s intent, a 1s WAIT and a 1s pause left 250ms; a WaitTimeout above
// about 1.25s let readers in between two attempts).
func (b *Backend) intentArg(intent time.Duration) string {
	if intent <= 0 {
		return "0"
	}
	if b.opts.WaitReplicas > 0 {
		intent += b.opts.WaitTimeout
	}
	return strconv.FormatInt(int64((intent+time.Millisecond-1)/time.Millisecond), 10)
}

// AcquireRW makes one attempt to take req.Key in req.Mode (rwlock.lua),
// followed by WAIT with WaitReplicas; a grant not confirmed by enough
// replicas is released again. A refused writer's intent is kept req.Intent
// past the end of the attempt: req.Intent plus WaitTimeout after the
// script with WaitReplicas (see intentArg).
func (b *Backend) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	op := req.Mode.String() + " acquire"
	if b.c.Closed() {
		return driver.Grant{}, redisscript.ErrClosed(op, req.Key)
	}
	ttl := b.ttl.Get(req.TTL)
	n, err := b.evalRW(ctx, op, req.Key, b.rwCall(req.Key, "acquire", req.Mode, req.Owner, ttl.S, b.intentArg(req.Intent)))
	if err != nil && n > 0 {
		// Granted but not confirmed: the reply came back, nothing of this
		// attempt is in flight, so the release carries the fence and is
		// not a clean-up, which would refuse the owner's next attempts.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
		g := driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(n)}
		err = errors.Join(err, b.ReleaseRW(rctx, g, req.Mode))
		cancel()
	}
	if err != nil {
		return driver.Grant{}, err
	}
	if n <= 0 {
		return driver.Grant{}, redisscript.Held(req.Key, n)
	}
	return redisscript.Grant(req.AcquireRequest, n, ttl), nil
}

// RenewRW extends g's lease of mode m to ttl if g.Owner still holds it
// (rwlock.lua), followed by WAIT with WaitReplicas; otherwise an error
// wrapping [driver.ErrNotHeld].
func (b *Backend) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, ttl time.Duration) (time.Duration, error) {
	op := m.String() + " renew"
	if b.c.Closed() {
		return 0, redisscript.ErrClosed(op, g.Key)
	}
	a := b.ttl.Get(ttl)
	n, err := b.evalRW(ctx, op, g.Key, b.rwCall(g.Key, "renew", m, g.Owner, a.S, "0"))
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, redisscript.NotHeld(op, g.Key)
	}
	return a.Duration(), nil
}

// ReleaseRW ends g's lease of mode m and g.Owner's intent (rwlock.lua),
// and wakes the name's watchers when it may have become free; an error
// wrapping [driver.ErrNotHeld] if g.Owner held no lease of mode m. A
// Grant with Fence 0 (the clean-up after an AcquireRW whose outcome is
// unknown) also makes the server remember the owner for
// redisscript.AbandonTTL and refuse its AcquireRW if that arrives later,
// as Release does for the lock.
func (b *Backend) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	op := m.String() + " release"
	if b.c.Closed() {
		return redisscript.ErrClosed(op, g.Key)
	}
	c := b.rwCall(g.Key, "release", m, g.Owner, "0", "0")
	if g.Fence == 0 {
		c.Args[7] = redisscript.AbandonTTLms
	}
	n, err := b.c.EvalInt(ctx, rwScript, c)
	if err != nil {
		return b.c.Wrap(op, g.Key, err)
	}
	if n != 1 {
		return redisscript.NotHeld(op, g.Key)
	}
	return nil
}

// rwInspectScript is rwinspect.lua; it changes nothing, so may run twice.
var rwInspectScript = newScript(redisscript.RWInspectLua, redisscript.SHA1Hex(redisscript.RWInspectLua), true)

// InspectRW reports the live writer, readers and intents of the
// read-write lock name and its fence counter (rwinspect.lua), without
// changing them; owner tokens are read but only their holder ids
// returned.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	const op = "inspect read-write lock"
	if err := b.readable(op, name); err != nil {
		return driver.RWInfo{}, err
	}
	keys := b.rwCall(name, "", driver.Read, "", "", "").Keys[:5]
	vals, err := b.c.Eval(ctx, rwInspectScript, keys, nil)
	if err != nil {
		return driver.RWInfo{}, b.c.Wrap(op, name, err)
	}
	return redisscript.ReadRWInspect(name, vals)
}
