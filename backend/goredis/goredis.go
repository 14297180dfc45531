// Package goredis is a [fencedlock.Backend] on Redis through
// github.com/redis/go-redis/v9: it takes a [redis.UniversalClient] (a
// plain *redis.Client, a Sentinel *redis.Client from
// redis.NewFailoverClient, or a *redis.ClusterClient), so a service that
// already uses go-redis needs no second client.
//
// It runs the same generated Lua scripts as backend/redis (one copy, in
// internal/redisscript), with the same key layout, the same replies and the
// same errors: the two backends can share a store, and their error values
// are the same variables ([ErrCorrupt] is backend/redis's ErrCorrupt). See
// the documentation of backend/redis for the key layout, memory use of
// fence counters, and operating notes; all of it applies here.
//
// Release wake-ups use go-redis Pub/Sub (SUBSCRIBE, or SSUBSCRIBE with
// [Options.ShardedPubSub]). This package imports neither rueidis nor etcd.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Defaults of [Options]; the same as backend/redis's.
const (
	// DefaultKeyPrefix is prepended to every key and channel when
	// Options.KeyPrefix is empty.
	DefaultKeyPrefix = redisscript.DefaultKeyPrefix
	// DefaultWaitTimeout bounds WAIT when Options.WaitReplicas is set and
	// Options.WaitTimeout is zero.
	DefaultWaitTimeout = redisscript.DefaultWaitTimeout
	// MaxKeyPrefixLen is the longest KeyPrefix accepted, in bytes.
	MaxKeyPrefixLen = redisscript.MaxKeyPrefixLen
	// DefaultMaxShardedConns bounds the subscription connections of
	// Options.ShardedPubSub when Options.MaxShardedConns is zero.
	DefaultMaxShardedConns = 64
)

// MaxFence is the greatest fence granted: 2^53, as in backend/redis (the
// scripts are the same). An Acquire of a free lock whose counter is at
// MaxFence fails with an error wrapping [ErrFenceExhausted].
const MaxFence fencing.Token = redisscript.MaxFence

// The errors of this package are the same variables as backend/redis's,
// so that errors.Is matches an error of either backend.
var (
	// ErrCorrupt is wrapped by errors about a lock or fence key holding a
	// value fencedlock did not write (WRONGTYPE, a fence counter that is
	// not a decimal counter, a lock without a TTL). Nothing was changed.
	// The errors of Acquire, Renew and Release that wrap it also wrap
	// [fencedlock.ErrPermanent], as do ACL and authentication refusals
	// (NOPERM, NOAUTH, WRONGPASS).
	ErrCorrupt = redisscript.ErrCorrupt
	// ErrReplication is wrapped by the error of an Acquire or Renew
	// acknowledged by fewer than Options.WaitReplicas replicas within
	// Options.WaitTimeout (an Acquire releases the lock again).
	ErrReplication = redisscript.ErrReplication
	// ErrFenceExhausted is wrapped by the error of an Acquire of a free
	// lock whose fence counter is at [MaxFence]; it also wraps
	// [fencedlock.ErrPermanent]. Nothing was changed.
	ErrFenceExhausted = redisscript.ErrFenceExhausted
	// ErrEvictionPolicy is wrapped by the error of [New] when a server's
	// maxmemory-policy is not noeviction. See [Options.AllowEvictingPolicy].
	ErrEvictionPolicy = redisscript.ErrEvictionPolicy
)

// Options configures a [Backend]. The zero value means the documented
// defaults. The fields mean what they mean in backend/redis.Options.
type Options struct {
	// KeyPrefix is prepended to every key and channel name. Default
	// DefaultKeyPrefix. It must not contain '{' or '}' and must be at most
	// MaxKeyPrefixLen bytes.
	KeyPrefix string

	// WaitReplicas, if positive, makes every successful Acquire and Renew
	// wait until that many replicas acknowledged it: WAIT, pipelined right
	// behind the script on the same connection. If fewer acknowledge within
	// WaitTimeout, an Acquire releases the lock and fails with an error
	// wrapping ErrReplication, and a Renew fails with such an error.
	// Default 0: no WAIT.
	WaitReplicas int

	// WaitTimeout bounds the WAIT of WaitReplicas. Default
	// DefaultWaitTimeout. Ignored when WaitReplicas is 0.
	WaitTimeout time.Duration

	// ShardedPubSub makes release publish with SPUBLISH and waiters
	// subscribe with SSUBSCRIBE (Redis 7 sharded Pub/Sub), one
	// subscription connection per hash slot watched at the moment, at most
	// MaxShardedConns. Set it on Redis Cluster 7 or later. Every backend
	// sharing a store must use the same setting. Default false.
	ShardedPubSub bool

	// MaxShardedConns bounds the subscription connections of
	// ShardedPubSub: a Watch on one more slot fails at once (the Locker
	// then waits with the holder's TTL hint). Default
	// DefaultMaxShardedConns; at most 16384. Ignored without ShardedPubSub.
	MaxShardedConns int

	// AllowEvictingPolicy lets [New] accept a server whose
	// maxmemory-policy is not noeviction, logging a warning instead of
	// failing with an error wrapping ErrEvictionPolicy. Default false.
	AllowEvictingPolicy bool

	// Logger receives debug records about subscriptions (keys and channel
	// names, never owner tokens), and warnings from New. Default: no
	// logging.
	Logger *slog.Logger
}

func (o Options) resolve() (Options, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return o, fmt.Errorf("redis: KeyPrefix %q contains '{' or '}': %w", o.KeyPrefix, fencedlock.ErrInvalid)
	}
	if len(o.KeyPrefix) > MaxKeyPrefixLen {
		return o, fmt.Errorf("redis: KeyPrefix of %d bytes exceeds %d: %w", len(o.KeyPrefix), MaxKeyPrefixLen, fencedlock.ErrInvalid)
	}
	if o.WaitReplicas < 0 {
		return o, fmt.Errorf("redis: WaitReplicas %d negative: %w", o.WaitReplicas, fencedlock.ErrInvalid)
	}
	if o.WaitTimeout < 0 {
		return o, fmt.Errorf("redis: WaitTimeout %v negative: %w", o.WaitTimeout, fencedlock.ErrInvalid)
	}
	if o.MaxShardedConns < 0 || o.MaxShardedConns > 16384 {
		return o, fmt.Errorf("redis: MaxShardedConns %d outside 0..16384: %w", o.MaxShardedConns, fencedlock.ErrInvalid)
	}
	if o.MaxShardedConns == 0 {
		o.MaxShardedConns = DefaultMaxShardedConns
	}
	if o.WaitReplicas > 0 && o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// script is one of the scripts shared with backend/redis, its SHA-1 and
// text boxed once (go-redis takes command arguments as []any).
type script struct{ sha, lua any }

var (
	acquireScript     = script{redisscript.AcquireSHA, redisscript.AcquireLua}
	renewScript       = script{redisscript.RenewSHA, redisscript.RenewLua}
	releaseScript     = script{redisscript.ReleaseSHA, redisscript.ReleaseLua}
	inspectScript     = script{redisscript.InspectSHA, redisscript.InspectLua}
	retireScript      = script{redisscript.RetireSHA, redisscript.RetireLua}
	fencedWriteScript = script{redisscript.FencedWriteSHA, redisscript.FencedWriteLua}
)

// The commands of the hot paths, each with its string arguments in one
// allocation: go-redis takes *string arguments, which box into an any
// without allocating, where each string would allocate.
type (
	acquireCall struct {
		cmd               [8]any
		lk, fk, ak, owner string
	}
	renewCall struct {
		cmd       [6]any
		lk, owner string
	}
	releaseCall struct {
		cmd                [10]any
		lk, ab, q, f       string
		owner, mode, aband string
	}
)

// run sends s as EVALSHA and, on NOSCRIPT, as EVAL. cmd is the whole
// command with two slots first for the command name and the script:
// nil, nil, numkeys, keys..., args... (one slice, so that a call
// allocates it once).
func (b *Backend) run(ctx context.Context, s script, cmd []any) *redis.Cmd {
	cmd[0], cmd[1] = "evalsha", s.sha
	r := b.c.Do(ctx, cmd...)
	if redis.HasErrorPrefix(r.Err(), "NOSCRIPT") {
		cmd[0], cmd[1] = "eval", s.lua
		r = b.c.Do(ctx, cmd...)
	}
	return r
}

// Backend is a [fencedlock.Backend] on Redis through go-redis. It also
// implements [fencedlock.Notifier] and [fencedlock.Inspector]. It is safe
// for concurrent use.
type Backend struct {
	c      redis.UniversalClient
	opts   Options
	closed atomic.Bool
	ttl    atomic.Pointer[ttlArg]

	hubsMu sync.Mutex
	hub    *hub                // the one hub without ShardedPubSub; nil until the first Watch
	hubs   map[uint16]*slotHub // with ShardedPubSub: a hub per watched slot
	done   bool                // Close was called; guarded by hubsMu
}

// slotHub is the hub of one hash slot and its number of watches.
type slotHub struct {
	h    *hub
	refs int
}

var (
	_ fencedlock.Backend   = (*Backend)(nil)
	_ fencedlock.Notifier  = (*Backend)(nil)
	_ fencedlock.Inspector = (*Backend)(nil)
)

// evictionCheckTimeout bounds the INFO memory New sends to each node.
const evictionCheckTimeout = 5 * time.Second

// New returns a Backend that uses client. It does not take ownership of
// client: [Backend.Close] leaves it open. Invalid options or a nil client
// return an error wrapping [fencedlock.ErrInvalid].
//
// As backend/redis.New, New reads maxmemory-policy from every node
// (INFO memory; for a *redis.ClusterClient from every shard): any policy
// but noeviction fails New with an error wrapping [ErrEvictionPolicy],
// unless [Options.AllowEvictingPolicy]. A server that refuses INFO is
// logged as a warning; an error reaching a node fails New.
func New(client redis.UniversalClient, opts Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: nil client: %w", fencedlock.ErrInvalid)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), evictionCheckTimeout)
	defer cancel()
	if err := checkEviction(ctx, client, o); err != nil {
		return nil, err
	}
	b := &Backend{c: client, opts: o}
	if o.ShardedPubSub {
		b.hubs = make(map[uint16]*slotHub)
	}
	return b, nil
}

// checkEviction reads maxmemory-policy from every node of c (see New).
func checkEviction(ctx context.Context, c redis.UniversalClient, o Options) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		return cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.Info(ctx, "memory").Result()
			mu.Lock()
			defer mu.Unlock()
			return checkPolicy(n.Options().Addr, info, err, o)
		})
	}
	addr := "server"
	if cl, ok := c.(*redis.Client); ok {
		addr = cl.Options().Addr
	}
	info, err := c.Info(ctx, "memory").Result()
	return checkPolicy(addr, info, err, o)
}

func checkPolicy(addr, info string, err error, o Options) error {
	if isRedisErr(err) {
		o.Logger.Warn("redis: cannot read maxmemory-policy (INFO refused); make sure it is noeviction, "+
			"or lock keys and fence counters may be evicted", "addr", addr, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis: reading maxmemory-policy of %s: %w", addr, err)
	}
	policy, maxmemory := redisscript.InfoField(info, "maxmemory_policy"), redisscript.InfoField(info, "maxmemory")
	if policy == "" {
		o.Logger.Warn("redis: the server does not report maxmemory-policy; make sure it is noeviction, "+
			"or lock keys and fence counters may be evicted", "addr", addr)
		return nil
	}
	if policy == "noeviction" {
		return nil
	}
	what := "held lock keys (they have a TTL): two holders at once"
	if strings.HasPrefix(policy, "allkeys-") {
		what = "held lock keys and fence counters: two holders at once, and fences that restart at 1"
	}
	if o.AllowEvictingPolicy {
		o.Logger.Warn("redis: maxmemory-policy is not noeviction (allowed by Options.AllowEvictingPolicy): "+
			"at maxmemory the server may evict "+what, "addr", addr, "policy", policy, "maxmemory", maxmemory)
		return nil
	}
	return fmt.Errorf("redis: %s has maxmemory-policy %s (maxmemory %s): at maxmemory it may evict %s; "+
		"set maxmemory-policy noeviction, or Options.AllowEvictingPolicy to accept the risk: %w",
		addr, policy, maxmemory, what, ErrEvictionPolicy)
}

// isRedisErr reports whether err is an error reply of the server (not
// redis.Nil, which go-redis also types as a reply error).
func isRedisErr(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	return errors.As(err, &re)
}

// Options returns the options in effect, defaults filled in.
func (b *Backend) Options() Options { return b.opts }

// LockKey returns the Redis key of the lock named key: KeyPrefix + "{" +
// escaped key + "}" ('%', '{' and '}' written as %25, %7B, %7D), exactly
// as backend/redis. Pass it to internal/redisscript/release.lua to release
// a lock by hand.
func (b *Backend) LockKey(key string) string { return redisscript.LockKey(b.opts.KeyPrefix, key) }

// FenceKey returns the Redis key of the fence counter of key: LockKey(key)
// + ":fence". It shares LockKey's hash slot.
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + redisscript.FenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + redisscript.ReleasedSuffix }

type ttlArg struct {
	ttl time.Duration
	ms  int64
	s   string
	arg any // s, boxed once
}

// ttlArg converts ttl to whole milliseconds, rounded up, reusing the last
// conversion.
func (b *Backend) ttlArg(ttl time.Duration) *ttlArg {
	if a := b.ttl.Load(); a != nil && a.ttl == ttl {
		return a
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	a := &ttlArg{ttl: ttl, ms: ms, s: strconv.FormatInt(ms, 10)}
	a.arg = a.s
	b.ttl.Store(a)
	return a
}

func errClosed(op, key string) error {
	return fmt.Errorf("redis: %s %q: backend closed: %w", op, key, fencedlock.ErrClosed)
}

// wrap turns an error of go-redis or of a script into the backend's error,
// as backend/redis does.
func wrap(op, key string, err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redis: %s %q: client closed: %w: %w", op, key, fencedlock.ErrClosed, err)
	}
	if isRedisErr(err) {
		msg := err.Error()
		if strings.Contains(msg, redisscript.AbandonedCode) {
			return fmt.Errorf("redis: %s %q: %w: the owner's attempt was cleaned up before it arrived: %w", op, key, fencedlock.ErrNotAcquired, err)
		}
		if strings.Contains(msg, redisscript.ExhaustedCode) {
			return permanentError{fmt.Errorf("redis: %s %q: %w (use another lock name; see MaxFence): %w", op, key, ErrFenceExhausted, err)}
		}
		if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, redisscript.CorruptCode) {
			return permanentError{fmt.Errorf("redis: %s %q: %w: %w", op, key, ErrCorrupt, err)}
		}
		for _, code := range []string{"NOPERM", "NOAUTH", "WRONGPASS"} {
			if strings.Contains(msg, code) {
				return permanentError{fmt.Errorf("redis: %s %q: %w", op, key, err)}
			}
		}
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, err)
}

// permanentError marks an error no retry can fix: it also wraps
// [fencedlock.ErrPermanent], without changing the message.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{e.err, fencedlock.ErrPermanent} }

// Acquire makes one attempt to take req.Key: one round trip running
// acquire.lua (SET NX PX, then INCR of the fence counter). If another
// owner holds the key it returns a *[fencedlock.HeldError] with the
// holder's remaining TTL. A repeated request of the same owner that
// already holds the key gets its fence again and a fresh TTL. With
// Options.WaitReplicas, WAIT follows the script on the same connection.
func (b *Backend) Acquire(ctx context.Context, req fencedlock.AcquireRequest) (fencedlock.Grant, error) {
	if b.closed.Load() {
		return fencedlock.Grant{}, errClosed("acquire", req.Key)
	}
	// The fence key holds the lock key as its prefix: one allocation.
	fk := b.opts.KeyPrefix + "{" + redisscript.Escape(req.Key) + "}" + redisscript.FenceSuffix
	lk := fk[:len(fk)-len(redisscript.FenceSuffix)]
	ttl := b.ttlArg(req.TTL)
	c := &acquireCall{lk: lk, fk: fk, ak: lk + redisscript.AbandonedSuffix, owner: req.Owner}
	c.cmd = [...]any{nil, nil, 3, &c.lk, &c.fk, &c.ak, &c.owner, ttl.arg}
	cmd := c.cmd[:]
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.execWait(ctx, acquireScript, lk, cmd)
		if err == nil && n > 0 && acked < int64(b.opts.WaitReplicas) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fencedlock.DefaultReleaseTimeout)
			rerr := b.Release(rctx, fencedlock.Grant{Key: req.Key, Owner: req.Owner})
			cancel()
			err = fmt.Errorf("redis: acquire %q: %d of %d replicas acknowledged within %v: %w",
				req.Key, acked, b.opts.WaitReplicas, b.opts.WaitTimeout, ErrReplication)
			if rerr != nil {
				err = fmt.Errorf("%w; releasing it again failed: %w", err, rerr)
			}
			return fencedlock.Grant{}, err
		}
	} else {
		n, err = b.run(ctx, acquireScript, cmd).Int64()
	}
	if err != nil {
		return fencedlock.Grant{}, wrap("acquire", req.Key, err)
	}
	if n <= 0 {
		return fencedlock.Grant{}, &fencedlock.HeldError{Key: req.Key, RetryAfter: time.Duration(-n) * time.Millisecond}
	}
	return fencedlock.Grant{
		Key:   req.Key,
		Owner: req.Owner,
		Fence: fencing.Token(n),
		TTL:   time.Duration(ttl.ms) * time.Millisecond,
	}, nil
}

// nodeFor returns the client whose connection carries a pipeline for key:
// for a cluster, the client of the primary serving key's slot (WAIT
// counts the writes of its own connection, so it must go there too).
func (b *Backend) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return b.c, nil
}

// execWait sends a script (cmd as for run) and WAIT in one pipeline on one
// connection, with EVAL on NOSCRIPT. It returns the script's reply and,
// when that reply is positive (the script wrote), WAIT's count.
func (b *Backend) execWait(ctx context.Context, s script, key string, cmd []any) (n, acked int64, err error) {
	waitMs := b.opts.WaitTimeout.Milliseconds()
	node, err := b.nodeFor(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	run := func(eval bool) (*redis.Cmd, *redis.Cmd) {
		p := node.Pipeline()
		if eval {
			cmd[0], cmd[1] = "eval", s.lua
		} else {
			cmd[0], cmd[1] = "evalsha", s.sha
		}
		sc := p.Do(ctx, cmd...)
		wc := p.Do(ctx, "wait", b.opts.WaitReplicas, waitMs)
		_, _ = p.Exec(ctx) // the errors are read from each command
		return sc, wc
	}
	sc, wc := run(false)
	if err := sc.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		sc, wc = run(true)
	}
	if n, err = sc.Int64(); err != nil {
		return 0, 0, err
	}
	if n <= 0 {
		return n, 0, nil // nothing written: WAIT's answer does not matter
	}
	if acked, err = wc.Int64(); err != nil {
		return 0, 0, err
	}
	return n, acked, nil
}

// Renew extends g's lease to ttl if g.Owner still holds g.Key: one round
// trip running renew.lua (followed by WAIT on the same connection with
// Options.WaitReplicas). Otherwise it changes nothing and returns an error
// wrapping [fencedlock.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g fencedlock.Grant, ttl time.Duration) (time.Duration, error) {
	if b.closed.Load() {
		return 0, errClosed("renew", g.Key)
	}
	a := b.ttlArg(ttl)
	c := &renewCall{lk: b.LockKey(g.Key), owner: g.Owner}
	c.cmd = [...]any{nil, nil, 1, &c.lk, &c.owner, a.arg}
	lk, cmd := c.lk, c.cmd[:]
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.execWait(ctx, renewScript, lk, cmd)
		if err == nil && n == 1 && acked < int64(b.opts.WaitReplicas) {
			return 0, fmt.Errorf("redis: renew %q: %d of %d replicas acknowledged within %v: %w",
				g.Key, acked, b.opts.WaitReplicas, b.opts.WaitTimeout, ErrReplication)
		}
	} else {
		n, err = b.run(ctx, renewScript, cmd).Int64()
	}
	if err != nil {
		return 0, wrap("renew", g.Key, err)
	}
	if n != 1 {
		return 0, fmt.Errorf("redis: renew %q: %w", g.Key, fencedlock.ErrNotHeld)
	}
	return time.Duration(a.ms) * time.Millisecond, nil
}

// Release deletes g.Key if g.Owner still holds it and publishes on the
// key's channel, waking waiters: one round trip running release.lua. If
// waiters of backend/redis's FairBackend are queued on the key, the same
// step hands the lock to the first live one instead. Otherwise it deletes nothing and returns an error wrapping
// [fencedlock.ErrNotHeld]. The fence counter is kept. A Grant with Fence 0
// (the Locker's clean-up after an Acquire whose outcome is unknown) also
// makes the server remember the owner for 5 minutes and refuse its
// acquire if that arrives later, as in backend/redis.
func (b *Backend) Release(ctx context.Context, g fencedlock.Grant) error {
	if b.closed.Load() {
		return errClosed("release", g.Key)
	}
	// KEYS: the lock, its abandoned set, its fair queue and its fence
	// counter (the three derived names in one allocation): a release
	// hands the lock to the first live waiter of backend/redis's
	// FairBackend queued on it, as backend/redis's release does.
	lk := b.LockKey(g.Key)
	s := lk + redisscript.AbandonedSuffix + lk + redisscript.QueueSuffix + lk + redisscript.FenceSuffix
	a := len(lk) + len(redisscript.AbandonedSuffix)
	q := a + len(lk) + len(redisscript.QueueSuffix)
	c := &releaseCall{lk: lk, ab: s[:a], q: s[a:q], f: s[q:], owner: g.Owner}
	if b.opts.ShardedPubSub {
		c.mode = "sharded"
	}
	if g.Fence == 0 {
		// A clean-up after an Acquire whose outcome is unknown (a Grant
		// of Key and Owner only): go-redis may still write that request
		// after this one, so the server also remembers the owner and
		// refuses its acquire if it arrives later.
		c.aband = redisscript.AbandonTTLms
	}
	c.cmd = [...]any{nil, nil, 4, &c.lk, &c.ab, &c.q, &c.f, &c.owner, &c.mode, &c.aband}
	cmd := c.cmd[:]
	n, err := b.run(ctx, releaseScript, cmd).Int64()
	if err != nil {
		return wrap("release", g.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("redis: release %q: %w", g.Key, fencedlock.ErrNotHeld)
	}
	return nil
}

// replyString returns a script reply element as a string; ok is false for
// a nil (Lua false) element.
func replyString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

// Inspect reports the state of key without changing it: whether it is
// held, the holder's remaining TTL, the last fence granted and the holder
// id ([fencedlock.HolderID] of the stored owner token; the token itself is
// never returned).
func (b *Backend) Inspect(ctx context.Context, key string) (fencedlock.Info, error) {
	if b.closed.Load() {
		return fencedlock.Info{}, errClosed("inspect", key)
	}
	if err := fencedlock.ValidateKey(key); err != nil {
		return fencedlock.Info{}, fmt.Errorf("redis: inspect: %w", err)
	}
	lk := b.LockKey(key)
	vals, err := b.run(ctx, inspectScript, []any{nil, nil, 2, lk, lk + redisscript.FenceSuffix}).Slice()
	if err != nil {
		return fencedlock.Info{}, wrap("inspect", key, err)
	}
	if len(vals) != 3 {
		return fencedlock.Info{}, fmt.Errorf("redis: inspect %q: unexpected reply of %d values", key, len(vals))
	}
	var info fencedlock.Info
	if owner, ok := replyString(vals[0]); ok {
		info.Held = true
		info.Holder = fencedlock.HolderID(owner)
		if pttl, ok := vals[1].(int64); ok && pttl > 0 {
			info.TTL = time.Duration(pttl) * time.Millisecond
		}
	}
	if s, ok := replyString(vals[2]); ok {
		f, ok := redisscript.ParseFence(s)
		if !ok {
			return fencedlock.Info{}, fmt.Errorf("redis: inspect %q: fence counter %q: %w", key, s, ErrCorrupt)
		}
		info.Fence = f
	}
	return info, nil
}

// RetireFence deletes the fence counter of key if key is not held, in one
// step (retire.lua), and returns the last fence granted (0 if there was no
// counter). If key is held it changes nothing and returns a
// *[fencedlock.HeldError]; a key fencedlock did not write returns an error
// wrapping [ErrCorrupt]. After it, a new Acquire of key starts again at
// fence 1: see backend/redis.Backend.RetireFence for when that is safe.
func (b *Backend) RetireFence(ctx context.Context, key string) (fencing.Token, error) {
	if b.closed.Load() {
		return 0, errClosed("retire fence", key)
	}
	if err := fencedlock.ValidateKey(key); err != nil {
		return 0, fmt.Errorf("redis: retire fence: %w", err)
	}
	lk := b.LockKey(key)
	n, err := b.run(ctx, retireScript, []any{nil, nil, 2, lk, lk + redisscript.FenceSuffix}).Int64()
	if err != nil {
		return 0, wrap("retire fence", key, err)
	}
	if n < 0 {
		return 0, &fencedlock.HeldError{Key: key, RetryAfter: time.Duration(-n) * time.Millisecond}
	}
	return fencing.Token(n), nil
}

// Close ends the backend's subscriptions and goroutines. It does not close
// the go-redis client. It is idempotent; other calls after Close return
// errors wrapping [fencedlock.ErrClosed].
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.hubsMu.Lock()
	b.done = true
	h, hubs := b.hub, b.hubs
	b.hub, b.hubs = nil, nil
	b.hubsMu.Unlock()
	if h != nil {
		h.close()
	}
	for _, sh := range hubs {
		sh.h.close()
	}
	return nil
}
