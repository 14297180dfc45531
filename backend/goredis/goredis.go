// Package goredis is a [driver.Backend] on Redis through
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
// A command goes out as Do sends it, on the caller's goroutine, while no
// more commands of the Backend are in flight than the client has pooled
// connections (PoolSize). Beyond that, commands go through the client's
// blocking autopipeliner (redis.UniversalClient.AutoPipeline, configured
// by the client's AutoPipelineOptions), which sends those waiting at the
// same moment as one pipeline: hooks of the client then see pipelines.
// A client with ContextTimeoutEnabled gets the deferred autopipeliner
// (AsyncAutoPipeline) instead, so that a context ends the wait of a
// pipelined command as it ends that of a direct one; the command may still
// run, and the Locker's clean-up after an outcome it cannot know (a
// release with the abandon mark) makes a late acquire take nothing.
//
// Every call ends when its context does, whatever the client's options,
// so that the Locker's ReleaseTimeout bounds Release and Close: a client
// without ContextTimeoutEnabled (go-redis's default) ends a command at its
// own timeouts only (ReadTimeout, WriteTimeout, retries; 5 s to a stopped
// server), so with a context that can end each command waits on a
// goroutine of its own (two allocations more per command: the goroutine and its channel) and the call
// returns the context's error if it ends first, the command left to finish
// alone. Script commands are sent at most once: go-redis's retries
// (MaxRetries) are turned off for them, since a script whose reply was lost
// may have run (see docs/redis-safety.md).
//
// Release wake-ups use go-redis Pub/Sub (SUBSCRIBE, or SSUBSCRIBE with
// [Options.ShardedPubSub]). [Backend] queues blocking acquires on the
// server in arrival order, as backend/redis's Backend does (the same
// queue: waiters of both packages queue together). This package imports
// neither rueidis nor etcd.
package goredis

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisnames"
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
	DefaultMaxShardedConns = redisscript.DefaultMaxShardedConns
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
	// [driver.ErrPermanent], as do ACL and authentication refusals, of
	// the request (NOPERM, NOAUTH, WRONGPASS) or of a command, key or
	// channel inside a script (see docs/redis-acl.md).
	ErrCorrupt = redisscript.ErrCorrupt
	// ErrReplication is wrapped by the error of an Acquire or Renew
	// acknowledged by fewer than Options.WaitReplicas replicas within
	// Options.WaitTimeout (an Acquire releases the lock again).
	ErrReplication = redisscript.ErrReplication
	// ErrFenceExhausted is wrapped by the error of an Acquire of a free
	// lock whose fence counter is at [MaxFence]; it also wraps
	// [driver.ErrPermanent]. Nothing was changed.
	ErrFenceExhausted = redisscript.ErrFenceExhausted
	// ErrEvictionPolicy is wrapped by the error of [New] when a server's
	// maxmemory-policy is not noeviction. See [Options.AllowEvictingPolicy].
	ErrEvictionPolicy = redisscript.ErrEvictionPolicy
)

// Options configures a [Backend]. The zero value means the documented
// defaults. The fields mean what they mean in backend/redis.Options: the
// two types have the same fields, checked and defaulted by the same code
// (internal/redisscript.Options).
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
	// ShardedPubSub: the hash slots watched at once, counting slots whose
	// connection is being closed. A Watch on one more slot waits (bounded
	// by its ctx) while a connection is being closed, and otherwise fails
	// at once (the Locker then waits with the holder's TTL hint). Default
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

// Backend is a [driver.Backend] on Redis through go-redis. Its waiters
// queue on the server and are granted the lock in the order they arrived,
// as backend/redis's Backend (the same queue and scripts: waiters of both
// clients queue together): it implements [driver.WaitAcquirer] and
// [driver.TryFirstWaiter], so [fencedlock.Locker.Acquire] waits through
// [Backend.AcquireWait], and a release hands the lock to the first live
// waiter in the same atomic step. It also implements [driver.Notifier] and
// [driver.Inspector]. It is safe for concurrent use.
type Backend struct {
	c      redis.UniversalClient
	opts   Options
	closed atomic.Bool
	store  *rediscore.Store   // the guarded writes (FencedSet, NewStore), made once
	core   *rediscore.Backend // the lock path

	inflight    atomic.Int32         // commands of process in flight
	direct      int32                // process sends at most this many in flight directly: the client's pool size
	ctxTimeouts bool                 // the client's ContextTimeoutEnabled: process honours ctx in the autopipeliner too
	apOnce      sync.Once            // sets ap
	ap          *redis.AutoPipeliner // the client's; nil: none

	hubs *rediscore.Hubs // the wake-up hub of Watch and AcquireWait
}

var (
	_ driver.Backend   = (*Backend)(nil)
	_ driver.Notifier  = (*Backend)(nil)
	_ driver.Inspector = (*Backend)(nil)
)

// New returns a Backend that uses client. It does not take ownership of
// client: [Backend.Close] leaves it open. Invalid options or a nil client
// return an error wrapping [driver.ErrInvalid].
//
// As backend/redis.New, New reads maxmemory-policy from every node
// (INFO memory; for a *redis.ClusterClient from every shard): any policy
// but noeviction fails New with an error wrapping [ErrEvictionPolicy],
// unless [Options.AllowEvictingPolicy]. A server that refuses INFO is
// logged as a warning; an error reaching a node fails New.
//
// A *redis.Ring is accepted, with its limit: a Ring shards keys itself by
// consistent hashing and moves a key to another shard when a shard is
// added, removed or found down by its heartbeat. A lock held on the old
// shard is then not seen on the new one: a second holder gets the key,
// with a fence from the new shard's counter, which need not be greater.
// A Ring is as safe as one server only while its shard set does not
// change; for locks prefer one server, Sentinel or Cluster. A set of more
// than one key (driver.MultiLocker) is refused on a Ring.
func New(client redis.UniversalClient, opts Options) (*Backend, error) {
	ro, err := redisscript.Prepare(client == nil, redisscript.Options(opts), func(ctx context.Context, o redisscript.Options) error {
		return checkEviction(ctx, client, o)
	})
	if err != nil {
		return nil, err
	}
	o := Options(ro)
	b := &Backend{c: client, opts: o, direct: poolSize(client), ctxTimeouts: contextTimeouts(client)}
	b.store = rediscore.NewStore(conn{b}, o.KeyPrefix)
	b.hubs = rediscore.NewHubs(pubsub{client}, o.Logger, o.ShardedPubSub, o.MaxShardedConns)
	b.core = rediscore.NewBackend(conn{b}, ro, b.hubs)
	return b, nil
}

// poolSize is the number of pooled connections of c (of each node, on a
// cluster): the PoolSize of its options, which go-redis defaults.
func poolSize(c redis.UniversalClient) int32 {
	n := 0
	switch c := c.(type) {
	case *redis.Client:
		n = c.Options().PoolSize
	case *redis.ClusterClient:
		n = c.Options().PoolSize
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	return int32(min(n, math.MaxInt32))
}

// contextTimeouts reports whether c honours the deadlines of contexts
// (ContextTimeoutEnabled in its options).
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// checkEviction reads maxmemory-policy from every node of c (see New).
func checkEviction(ctx context.Context, c redis.UniversalClient, o redisscript.Options) error {
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

func checkPolicy(addr, info string, err error, o redisscript.Options) error {
	if isRedisErr(err) {
		o.WarnInfoRefused(addr, err)
		return nil
	}
	if err != nil {
		return redisscript.ReadInfoError(addr, err)
	}
	return o.CheckPolicy(addr, info)
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
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + redisnames.FenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + redisnames.ReleasedSuffix }

// wrap turns an error of go-redis or of a script into the backend's error
// (redisscript.Wrap, as backend/redis does).
func wrap(op, key string, err error) error {
	return redisscript.Wrap(op, key, err, errors.Is(err, redis.ErrClosed), isRedisErr(err))
}

// Acquire makes one attempt to take req.Key: one round trip running
// acquire.lua (SET NX PX, then INCR of the fence counter). If another
// owner holds the key it returns a *[driver.HeldError] with the
// holder's remaining TTL. While waiters are queued on the key
// ([Backend.AcquireWait]) it takes nothing, even a free lock: it then
// returns a *[driver.HeldError] with RetryAfter 0, and the caller queues
// behind them. A repeated request of the same owner that already holds
// the key gets its fence again and a fresh TTL. With
// Options.WaitReplicas, WAIT follows the script on the same connection.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.Acquire(ctx, req)
}

// Renew extends g's lease to ttl if g.Owner still holds g.Key: one round
// trip running renew.lua (followed by WAIT on the same connection with
// Options.WaitReplicas). Otherwise it changes nothing and returns an error
// wrapping [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	return b.core.Renew(ctx, g, ttl)
}

// Release deletes g.Key if g.Owner still holds it and publishes on the
// key's channel, waking waiters: one round trip running release.lua. If
// waiters (of either Redis package) are queued on the key, the same step
// hands the lock to the first live one instead. Otherwise it deletes nothing and returns an error wrapping
// [driver.ErrNotHeld]. The fence counter is kept. A Grant with Fence 0
// (the Locker's clean-up after an Acquire whose outcome is unknown) also
// makes the server remember the owner for 5 minutes and refuse its
// acquire if that arrives later, as in backend/redis.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	return b.core.Release(ctx, g)
}

// Inspect reports the state of key without changing it: whether it is
// held, the holder's remaining TTL, the last fence granted and the holder
// id ([driver.HolderID] of the stored owner token; the token itself is
// never returned).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	return b.core.Inspect(ctx, key)
}

// RetireFence deletes the fence counter of key if key is not held, in one
// step (retire.lua), and returns the last fence granted (0 if there was no
// counter). If key is held it changes nothing and returns a
// *[driver.HeldError]; a key fencedlock did not write returns an error
// wrapping [ErrCorrupt]. After it, a new Acquire of key starts again at
// fence 1: see backend/redis.Backend.RetireFence for when that is safe.
func (b *Backend) RetireFence(ctx context.Context, key string) (fencing.Token, error) {
	return b.core.RetireFence(ctx, key)
}

// Close ends the backend's subscriptions and goroutines. It does not close
// the go-redis client, nor the client's autopipeliner (which the client's
// Close ends). It is idempotent; other calls after Close return
// errors wrapping [driver.ErrClosed].
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.hubs.Close()
	return nil
}
