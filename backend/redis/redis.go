package redis

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/rueidis"
)

// Defaults of [Options].
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

var (
	// ErrCorrupt is wrapped by errors about a lock or fence key holding a
	// value fencedlock did not write: another type (WRONGTYPE), a fence
	// counter that is not a decimal counter, a lock without a TTL. Nothing
	// was changed on the server. The errors of Acquire, Renew and Release
	// that wrap it also wrap [driver.ErrPermanent], as do ACL and
	// authentication refusals, of the request (NOPERM, NOAUTH, WRONGPASS)
	// or of a command, key or channel inside a script (see
	// docs/redis-acl.md).
	ErrCorrupt = redisscript.ErrCorrupt
	// ErrReplication is wrapped by the error of an Acquire whose lock was
	// acknowledged by fewer than Options.WaitReplicas replicas within
	// Options.WaitTimeout. The lock was released again (token-checked).
	ErrReplication = redisscript.ErrReplication
	// ErrFenceExhausted is wrapped by the error of an Acquire of a free
	// lock whose fence counter is at [MaxFence]: the scripts cannot grant a
	// greater fence exactly, so the lock cannot be taken again under its
	// name. Nothing was changed. No retry helps, so it also wraps
	// [driver.ErrPermanent]: Acquire returns it at once. See [MaxFence].
	ErrFenceExhausted = redisscript.ErrFenceExhausted
	// ErrEvictionPolicy is wrapped by the error of [New] when a server's
	// maxmemory-policy is not noeviction: such a server may evict a held
	// lock key (two holders at once) or a fence counter (the fences of its
	// name restart at 1). See [Options.AllowEvictingPolicy].
	ErrEvictionPolicy = redisscript.ErrEvictionPolicy
)

// Options configures a [Backend]. The zero value means the documented
// defaults. backend/goredis.Options has the same fields (both convert to
// internal/redisscript.Options, which checks them and fills in the
// defaults for both backends).
type Options struct {
	// KeyPrefix is prepended to every key and channel name. Default
	// DefaultKeyPrefix. It must not contain '{' or '}' (the backend places
	// the Cluster hash tag itself) and must be at most MaxKeyPrefixLen
	// bytes.
	KeyPrefix string

	// WaitReplicas, if positive, makes every successful Acquire and Renew
	// wait until that many replicas acknowledged it (Redis WAIT, sent on
	// the same connection right behind the script, so still one round
	// trip to the primary). If fewer acknowledge within WaitTimeout, an
	// Acquire releases the lock and fails with an error wrapping
	// ErrReplication; a Renew fails with such an error too, so the Locker
	// does not move the lease's local deadline for a renewal a promoted
	// replica might not have (it retries, and reports the lease lost at
	// the deadline if no renewal is acknowledged in time). This narrows,
	// but does not close, the window in which a failover can lose a lock
	// (Sentinel may promote a replica that did not acknowledge); fences
	// and guards stay the real protection. Default 0: no WAIT.
	WaitReplicas int

	// WaitTimeout bounds the WAIT of WaitReplicas. Default
	// DefaultWaitTimeout. Ignored when WaitReplicas is 0.
	WaitTimeout time.Duration

	// ShardedPubSub makes release publish with SPUBLISH and waiters
	// subscribe with SSUBSCRIBE (Redis 7 sharded Pub/Sub): on Redis Cluster
	// a release then reaches only the shard serving the key's slot instead
	// of being broadcast to every node, as PUBLISH is. Set it on Redis
	// Cluster 7 or later (a server without SPUBLISH fails every release).
	// Waiters then use one subscription connection per hash slot watched
	// at the moment (a sharded subscription must be made on the node
	// serving the slot), at most MaxShardedConns; the connection of a slot
	// goes back to rueidis's pool, unsubscribed, when its last watch stops.
	// Every backend sharing a store must use the same setting, or waiters
	// miss wake-ups and fall back to the holder's TTL hint. Default false:
	// PUBLISH and SUBSCRIBE, which work on every topology. It is not
	// turned on from the client's mode because rueidis also reports
	// cluster mode for servers that merely answer CLUSTER SLOTS (miniredis).
	ShardedPubSub bool

	// MaxShardedConns bounds the subscription connections of
	// ShardedPubSub: the hash slots watched at once, counting slots whose
	// connection is being given back. A Watch on one more slot waits
	// (bounded by its ctx) while a connection is being given back, and
	// otherwise fails at once (the Locker then waits with the holder's TTL
	// hint and retries instead of being woken). Default DefaultMaxShardedConns;
	// at most 16384 (the number of slots). Ignored without ShardedPubSub.
	MaxShardedConns int

	// AllowEvictingPolicy lets [New] accept a server whose maxmemory-policy
	// is not noeviction, logging a warning instead of failing with an
	// error wrapping ErrEvictionPolicy. Under an allkeys-* policy Redis may
	// evict a held lock key and a fence counter: a second holder gets the
	// lock while the first still runs, with a fence that restarts at 1.
	// Under a volatile-* policy it may evict held lock keys (they have a
	// TTL): two holders at once, though fences stay monotonic. Set it only
	// for a server that never reaches maxmemory. Default false.
	AllowEvictingPolicy bool

	// Logger receives debug records about subscriptions and reconnections
	// (keys and channel names, never owner tokens), and warnings from New
	// (an evicting policy allowed, or a policy New could not read).
	// Default: no logging.
	Logger *slog.Logger
}

// Backend is a [driver.Backend] on Redis. Its waiters queue on the server
// and are granted the lock in the order they arrived: it implements
// [driver.WaitAcquirer] and [driver.TryFirstWaiter], so
// [fencedlock.Locker.Acquire] waits through [Backend.AcquireWait], and a
// release hands the lock to the first live waiter in the same atomic step
// and wakes that waiter alone, instead of waking every waiter to race for
// it. It also implements [driver.Notifier] (watchers woken by the release
// script's PUBLISH) and [driver.Inspector]. It is safe for concurrent use.
type Backend struct {
	c      rueidis.Client
	opts   Options
	closed atomic.Bool
	hubs   *rediscore.Hubs    // the wake-up hub of Watch and AcquireWait
	store  *rediscore.Store   // the guarded writes (FencedSet, NewStore), made once
	core   *rediscore.Backend // the lock path and the fair queue

	// sharded is Options.ShardedPubSub: release publishes with SPUBLISH
	// and watches use SSUBSCRIBE, one subscription connection per hash
	// slot watched (see rediscore.Hubs).
	sharded bool
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
// New reads maxmemory-policy from every node the client knows (INFO
// memory, one round trip per node, at most 5 s each). Only noeviction
// keeps fencedlock safe when the server runs out of memory (writes then
// fail with OOM instead of keys disappearing): under any other policy New
// fails with an error wrapping [ErrEvictionPolicy], unless
// [Options.AllowEvictingPolicy]. A server that refuses INFO (an ACL
// without +info, a managed service) is logged as a warning through
// [Options.Logger], and New goes on; an error reaching a node fails New.
// The policy is read once: keep it noeviction (see the package
// documentation, "Memory").
func New(client rueidis.Client, opts Options) (*Backend, error) {
	ro, err := redisscript.Prepare(client == nil, redisscript.Options(opts), func(ctx context.Context, o redisscript.Options) error {
		return checkEviction(ctx, client, o)
	})
	if err != nil {
		return nil, err
	}
	o := Options(ro)
	b := &Backend{c: client, opts: o}
	b.store = rediscore.NewStore(conn{b}, o.KeyPrefix)
	b.sharded = o.ShardedPubSub
	b.hubs = rediscore.NewHubs(pubsub{client}, o.Logger, o.ShardedPubSub, o.MaxShardedConns)
	b.core = rediscore.NewBackend(conn{b}, ro, b.hubs)
	return b, nil
}

// checkEviction reads maxmemory-policy from every node of c (see New).
func checkEviction(ctx context.Context, c rueidis.Client, o redisscript.Options) error {
	for addr, n := range c.Nodes() {
		info, err := n.Do(ctx, n.B().Info().Section("memory").Build()).ToString()
		if _, ok := rueidis.IsRedisErr(err); ok {
			o.WarnInfoRefused(addr, err)
			continue
		}
		if err != nil {
			return redisscript.ReadInfoError(addr, err)
		}
		if err := o.CheckPolicy(addr, info); err != nil {
			return err
		}
	}
	return nil
}

// Options returns the options in effect, defaults filled in.
func (b *Backend) Options() Options { return b.opts }

// LockKey returns the Redis key of the lock named key: KeyPrefix + "{" +
// escaped key + "}" (see the package documentation). Pass it to
// internal/redisscript/release.lua to release a lock by hand.
func (b *Backend) LockKey(key string) string { return redisscript.LockKey(b.opts.KeyPrefix, key) }

// FenceKey returns the Redis key of the fence counter of key: LockKey(key)
// + ":fence". It shares LockKey's hash slot.
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + redisnames.FenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + redisnames.ReleasedSuffix }

func errClosed(op, key string) error { return redisscript.ErrClosed(op, key) }

// wrap turns an error of rueidis or of a script into the backend's error
// (redisscript.Wrap, as backend/goredis does).
func wrap(op, key string, err error) error {
	_, reply := rueidis.IsRedisErr(err)
	return redisscript.Wrap(op, key, err, errors.Is(err, rueidis.ErrClosing), reply)
}

// Acquire makes one attempt to take req.Key: one round trip running
// internal/redisscript/acquire.lua (SET NX PX, then INCR of the fence
// counter). If another owner holds the key it returns a
// *[driver.HeldError] with the holder's remaining TTL. While waiters are
// queued on the key ([Backend.AcquireWait]) it takes nothing, even if the
// lock is free (its holder's lease expired and the first waiter has not
// yet run wait.lua again): it returns a *[driver.HeldError] with
// RetryAfter 0, and the caller queues behind them. A repeated request of
// the same owner that already holds the key (a retry whose first reply
// was lost) gets its fence again and a fresh TTL. With
// Options.WaitReplicas, WAIT follows the script on the same connection.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.core.Acquire(ctx, req)
}

// Renew extends g's lease to ttl if g.Owner still holds g.Key: one round
// trip running internal/redisscript/renew.lua (followed by WAIT on the same connection
// with Options.WaitReplicas). Otherwise it changes nothing and returns
// an error wrapping [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	return b.core.Renew(ctx, g, ttl)
}

// Release deletes g.Key if g.Owner still holds it and publishes on the
// key's channel, waking waiters: one round trip running
// internal/redisscript/release.lua. If waiters are queued on the key
// ([Backend.AcquireWait]), the same step hands the lock to the first live one instead
// (its lease, the next fence, and a message waking it alone). Otherwise it
// deletes nothing and returns an error wrapping [driver.ErrNotHeld].
// The fence counter is kept.
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

// value is a value of a rueidis reply, read by internal/redisscript.
type value struct{ m *rueidis.RedisMessage }

func (v value) Text() (string, bool, error) {
	if v.m.IsNil() {
		return "", false, nil
	}
	if v.m.IsInt64() {
		n, _ := v.m.AsInt64()
		return strconv.FormatInt(n, 10), true, nil
	}
	s, err := v.m.ToString()
	return s, err == nil, err
}

func (v value) Int() (int64, error) { return v.m.AsInt64() }

// values wraps a rueidis reply for internal/redisscript.
func values(vals []rueidis.RedisMessage) []redisscript.Value {
	out := make([]redisscript.Value, len(vals))
	for i := range vals {
		out[i] = value{&vals[i]}
	}
	return out
}

// RetireFence deletes the fence counter of key if key is not held, in one
// step (internal/redisscript/retire.lua), and returns the last fence granted (0 if there
// was no counter). If key is held it changes nothing and returns a
// *[driver.HeldError]; a key fencedlock did not write returns an error
// wrapping [ErrCorrupt].
//
// Fence counters never expire (see the package documentation, "Memory"):
// RetireFence is how an operator reclaims the counter of a name no
// process uses any more. After it, a new Acquire of key starts again at
// fence 1, so retire a name only when no holder of it can still write
// (every process that used it has stopped using it: a paused holder
// resumes with its old fence), and either the resources it guarded are
// gone, or they keep their fence records: then they reject the new
// name's smaller fences until the counter passes the record. To reuse a
// retired name with monotonic fences, first restore its counter to the
// returned fence: SET <FenceKey(key)> <fence> NX.
func (b *Backend) RetireFence(ctx context.Context, key string) (fencing.Token, error) {
	return b.core.RetireFence(ctx, key)
}

// MaxFence is the greatest fence the Redis backend grants: 2^53, up to
// which every integer is exact in Lua numbers (doubles), through which the
// scripts pass INCR's reply. Every fence up to MaxFence is granted
// exactly; an Acquire of a free lock whose counter is at MaxFence fails
// with an error wrapping [ErrFenceExhausted] and changes nothing, and a
// counter above it is reported as [ErrCorrupt]. Counting there takes 2^53
// acquisitions of one name (285 years at a million a second): a counter
// reaches it only when set by hand. The name is then spent: use another
// lock name, and reset the fence records of the resources it guarded
// (they hold fences up to MaxFence and would reject the new name's small
// fences) while no holder of the old name can still write.
const MaxFence fencing.Token = redisscript.MaxFence

// Close ends the backend's subscriptions and goroutines. It does not close
// the rueidis client. It is idempotent; other calls after Close return
// errors wrapping [driver.ErrClosed].
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.hubs.Close()
	return nil
}
