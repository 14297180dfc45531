package rediscore

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Backend is the lock path of a Redis backend, written once: Acquire,
// Renew, Release, Inspect, RetireFence and ForceRelease of the adapters'
// Backend types, which delegate to it (their doc comments say what each
// does). It is safe for concurrent use.
type Backend struct {
	c    Conn
	opts redisscript.Options // resolved: defaults filled in
	hubs *Hubs               // the fair queue's wake-ups
	ttl  redisscript.TTLCache
}

// NewBackend returns the Backend that sends its commands through c with
// the resolved options opts, and whose fair waiters are woken through
// hubs.
func NewBackend(c Conn, opts redisscript.Options, hubs *Hubs) *Backend {
	return &Backend{c: c, opts: opts, hubs: hubs}
}

// eval runs s with c, followed on the same connection by WAIT with
// WaitReplicas when that is set; acked is the count of replicas WAIT
// reported (0 without WAIT). See [Backend.unconfirmed].
func (b *Backend) eval(ctx context.Context, s *Script, c *Call) (n, acked int64, err error) {
	if b.opts.WaitReplicas > 0 {
		return b.c.EvalWait(ctx, s, c, b.opts.WaitReplicas, b.opts.WaitTimeout)
	}
	n, err = b.c.EvalInt(ctx, s, c)
	return n, 0, err
}

// unconfirmed reports whether acked, the replicas a WAIT of [Backend.eval]
// counted, is fewer than WaitReplicas: the script's writes may be on the
// primary alone. Never with WaitReplicas 0.
func (b *Backend) unconfirmed(acked int64) bool {
	return acked < int64(b.opts.WaitReplicas)
}

// Acquire makes one attempt to take req.Key (acquire.lua), followed by
// WAIT with WaitReplicas. While waiters are queued on the key it takes
// nothing, even a free lock (see the adapters' Backend.Acquire).
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	const op = "acquire"
	if b.c.Closed() {
		return driver.Grant{}, redisscript.ErrClosed(op, req.Key)
	}
	c := b.newCall(req.Key)
	c.Keys = c.names[:] // lock, fence, abandoned, queue
	ttl := b.ttl.Get(req.TTL)
	c.args[0], c.args[1] = req.Owner, ttl.S
	c.Args = c.args[:2]
	n, acked, err := b.eval(ctx, acquireScript, c)
	if err == nil && n > 0 && b.unconfirmed(acked) {
		// Granted but not confirmed: the reply came back, nothing of this
		// attempt is in flight, so the release carries the fence and is
		// not a clean-up (Fence 0), which would refuse the owner's next
		// attempts for AbandonTTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
		rerr := b.Release(rctx, driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(n)})
		cancel()
		return driver.Grant{}, b.opts.NotReplicated(op, req.Key, acked, rerr)
	}
	if err != nil {
		return driver.Grant{}, b.c.Wrap(op, req.Key, err)
	}
	if n <= 0 {
		return driver.Grant{}, redisscript.Held(req.Key, n)
	}
	c.done(nil)
	g := redisscript.Grant(req, n, ttl)
	g.Data = c // the lock's names, for the lease's Renew and Release
	return g, nil
}

// Renew extends g's lease to ttl if g.Owner still holds g.Key
// (renew.lua), followed by WAIT with WaitReplicas; otherwise an error
// wrapping [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	const op = "renew"
	if b.c.Closed() {
		return 0, redisscript.ErrClosed(op, g.Key)
	}
	a := b.ttl.Get(ttl)
	c := b.callFor(&g)
	c.Keys = c.names[:1]
	c.args[0], c.args[1] = g.Owner, a.S
	c.Args = c.args[:2]
	n, acked, err := b.eval(ctx, renewScript, c)
	c.done(err)
	if err == nil && n == 1 && b.unconfirmed(acked) {
		// Applied on the primary but not confirmed on enough replicas:
		// not a renewal the Locker may count on.
		return 0, b.opts.NotReplicated(op, g.Key, acked, nil)
	}
	if err != nil {
		return 0, b.c.Wrap(op, g.Key, err)
	}
	if n != 1 {
		return 0, redisscript.NotHeld(op, g.Key)
	}
	return a.Duration(), nil
}

// Release deletes g.Key if g.Owner still holds it, or hands it to the
// first live waiter of a fair queue (release.lua); otherwise an error
// wrapping [driver.ErrNotHeld]. A Grant with Fence 0 (the Locker's
// clean-up after an Acquire whose outcome is unknown) also makes the
// server remember the owner for redisscript.AbandonTTL.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	const op = "release"
	if b.c.Closed() {
		return redisscript.ErrClosed(op, g.Key)
	}
	n, err := b.release(ctx, g)
	if err != nil {
		return err
	}
	if n != 1 {
		return redisscript.NotHeld(op, g.Key)
	}
	return nil
}

// release runs release.lua for g, closed backend or not, and returns its
// reply: 1 if g's lock was deleted or handed over.
func (b *Backend) release(ctx context.Context, g driver.Grant) (int64, error) {
	// KEYS: the lock, its fair queue, its fence counter and (a clean-up
	// only) its abandoned set. A plain release sends only what it needs
	// (every key and argument costs the server time).
	c := b.callFor(&g)
	c.keys = [4]string{c.names[0], c.names[3], c.names[1], c.names[2]}
	c.Keys = c.keys[:3]
	c.args[0] = g.Owner
	c.Args = c.args[:1]
	if b.opts.ShardedPubSub {
		c.args[1] = "sharded"
		c.Args = c.args[:2]
	}
	if g.Fence == 0 {
		// A clean-up after an Acquire whose outcome is unknown (a Grant of
		// Key and Owner only): the client may still write that request
		// after this one, so the server also remembers the owner and
		// refuses its acquire if it arrives later, and the owner leaves
		// the fair queue.
		c.Keys = c.keys[:4]
		c.args[2] = redisscript.AbandonTTLms
		c.Args = c.args[:3]
	}
	n, err := b.c.EvalInt(ctx, releaseScript, c)
	c.done(err)
	if err != nil {
		return 0, b.c.Wrap("release", g.Key, err)
	}
	return n, nil
}

// readable checks, before op reads key (Inspect, Leader, InspectRW,
// RetireFence), that the backend is open and key valid.
func (b *Backend) readable(op, key string) error {
	if b.c.Closed() {
		return redisscript.ErrClosed(op, key)
	}
	return redisscript.CheckInspectKey(op, key)
}

// Inspect reports the state of key without changing it (inspect.lua).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	const op = "inspect"
	if err := b.readable(op, key); err != nil {
		return driver.Info{}, err
	}
	lk := redisscript.LockKey(b.opts.KeyPrefix, key)
	vals, err := b.c.Eval(ctx, inspectScript, []string{lk, lk + redisnames.FenceSuffix}, nil)
	if err != nil {
		return driver.Info{}, b.c.Wrap(op, key, err)
	}
	return redisscript.ReadInspect(key, vals)
}

// RetireFence deletes the fence counter of key if key is not held
// (retire.lua) and returns the last fence granted; a held key returns a
// *[driver.HeldError].
func (b *Backend) RetireFence(ctx context.Context, key string) (fencing.Token, error) {
	const op = "retire fence"
	if err := b.readable(op, key); err != nil {
		return 0, err
	}
	c := b.newCall(key)
	c.Keys = c.names[:2]
	n, err := b.c.EvalInt(ctx, retireScript, c)
	if err != nil {
		return 0, b.c.Wrap(op, key, err)
	}
	if n < 0 {
		return 0, redisscript.Held(key, n)
	}
	return fencing.Token(n), nil
}
