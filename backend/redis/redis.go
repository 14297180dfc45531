package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
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

// Backend is a [driver.Backend] on Redis. It also implements
// [driver.Notifier] (waiters woken by the release script's PUBLISH) and
// [driver.Inspector]. It is safe for concurrent use.
type Backend struct {
	c      rueidis.Client
	opts   Options
	closed atomic.Bool
	hub    *hub                 // nil when sharded: see hubs
	ttl    redisscript.TTLCache // the last TTL argument, to avoid formatting it per call

	// sharded is Options.ShardedPubSub: release publishes with
	// SPUBLISH and watches use SSUBSCRIBE, one subscription connection
	// per hash slot watched (a sharded subscription must be made on the
	// node serving the channel's slot). A slot's hub lives while it has
	// watches (refs); the last stop removes it and closes it in the
	// background (reclaim), which Close waits for.
	sharded bool
	hubsMu  sync.Mutex
	hubs    map[uint16]*slotHub // nil once closed
	closing int                 // hubs removed from hubs, still closing
	freed   chan struct{}       // closed (and replaced) when one of them is closed
	reclaim sync.WaitGroup
}

// slotHub is the hub of one hash slot and the number of watches using it
// (guarded by Backend.hubsMu).
type slotHub struct {
	h    *hub
	refs int
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
	if o.ShardedPubSub {
		b.sharded = true
		b.hubs = make(map[uint16]*slotHub)
		b.freed = make(chan struct{})
	} else {
		b.hub = newHub(client, o.Logger, false)
	}
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
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + fenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + releasedSuffix }

func errClosed(op, key string) error { return redisscript.ErrClosed(op, key) }

// lockKeys holds the Redis keys of one lock, made once per Acquire and
// kept as the Grant's Data, so that the lease's every Renew and its
// Release reuse them instead of escaping the key and concatenating the
// names again. All five names are slices of one string (one allocation).
// It is immutable, and holds no secret (a Grant prints its Data).
type lockKeys struct {
	b   *Backend  // the backend that made it: its KeyPrefix
	key string    // the lock's name (Grant.Key)
	acq [4]string // acquire.lua's and wait.lua's KEYS: lock, fence, abandoned, queue (FairBackend only: see acquireKeys)
	rel [4]string // release.lua's KEYS: lock, queue, fence, abandoned (a clean-up only)
}

// String returns the lock key.
func (k *lockKeys) String() string { return k.acq[0] }

// newLockKeys returns the keys of the lock named key.
func (b *Backend) newLockKeys(key string) *lockKeys {
	p, esc := b.opts.KeyPrefix, redisscript.Escape(key)
	s := p + "{" + esc + "}" + fenceSuffix + p + "{" + esc + "}" + abandonedSuffix + p + "{" + esc + "}" + queueSuffix
	n := len(p) + len(esc) + 2 // the lock key: LockKey(key)
	f := n + len(fenceSuffix)
	a := f + n + len(abandonedSuffix)
	lock, fence, abandoned, queue := s[:n], s[:f], s[f:a], s[a:]
	return &lockKeys{b: b, key: key, acq: [4]string{lock, fence, abandoned, queue}, rel: [4]string{lock, queue, fence, abandoned}}
}

// keysOf returns the keys of g's lock: g's Data if this backend made it
// for g.Key, else newly made (a Grant of Key and Owner only, as the
// Locker's clean-up sends, or one of another backend).
func (b *Backend) keysOf(g *driver.Grant) *lockKeys {
	if k, ok := g.Data.(*lockKeys); ok && k.b == b && k.key == g.Key {
		return k
	}
	return b.newLockKeys(g.Key)
}

// wrap turns an error of rueidis or of a script into the backend's error
// (redisscript.Wrap, as backend/goredis does).
func wrap(op, key string, err error) error {
	_, reply := rueidis.IsRedisErr(err)
	return redisscript.Wrap(op, key, err, errors.Is(err, rueidis.ErrClosing), reply)
}

// Acquire makes one attempt to take req.Key: one round trip running
// internal/redisscript/acquire.lua (SET NX PX, then INCR of the fence counter). If
// another owner holds the key it returns a *[driver.HeldError] with the
// holder's remaining TTL. A repeated request of the same owner that already
// holds the key (a retry whose first reply was lost) gets its fence again
// and a fresh TTL. With Options.WaitReplicas, WAIT follows the script on
// the same connection.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.acquire(ctx, req, false)
}

// acquire is Acquire; with fair, acquire.lua also gets the fair queue's
// key and takes nothing while waiters are queued (see FairBackend.Acquire).
func (b *Backend) acquire(ctx context.Context, req driver.AcquireRequest, fair bool) (driver.Grant, error) {
	if b.closed.Load() {
		return driver.Grant{}, errClosed("acquire", req.Key)
	}
	lks := b.newLockKeys(req.Key)
	keys := lks.acq[:3]
	if fair {
		keys = lks.acq[:]
	}
	ttl := b.ttl.Get(req.TTL)
	args := []string{req.Owner, ttl.S}
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.acquireWait(ctx, keys, args)
		if err == nil && n > 0 && acked < int64(b.opts.WaitReplicas) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
			rerr := b.Release(rctx, driver.Grant{Key: req.Key, Owner: req.Owner})
			cancel()
			return driver.Grant{}, redisscript.Options(b.opts).NotReplicated("acquire", req.Key, acked, rerr)
		}
	} else {
		n, err = runScript(ctx, b.c, acquireScript, keys, args).AsInt64()
	}
	if err != nil {
		return driver.Grant{}, wrap("acquire", req.Key, err)
	}
	if n <= 0 {
		return driver.Grant{}, redisscript.Held(req.Key, n)
	}
	g := redisscript.Grant(req, n, ttl)
	g.Data = lks
	return g, nil
}

// acquireWait sends the acquire script and WAIT in one pipeline (see
// execWait). It returns the script's reply and WAIT's count; WAIT's answer
// is not read when the key is held.
func (b *Backend) acquireWait(ctx context.Context, keys, args []string) (n, acked int64, err error) {
	return b.execWait(ctx, acquireSHA, acquireLua, keys, args)
}

// execWait sends a script and WAIT in one pipeline on one connection (WAIT
// counts the writes of its own connection), with EVAL on NOSCRIPT. It
// returns the script's reply and, when that reply is positive (the script
// wrote), WAIT's count.
//
// It does not use rueidis.Lua (whose Exec does the same EVALSHA -> EVAL
// fallback, and which Acquire and Renew use without WaitReplicas): WAIT
// must follow the script on the same connection, and Lua.Exec and
// Lua.ExecMulti send scripts only, each on a connection rueidis chooses.
// Running Lua.Exec and then WAIT on a DedicatedClient would keep them on
// one connection but take two round trips to the primary instead of this
// pipeline's one (counted: one DoMulti here, two Do calls there), on every
// Acquire and Renew with WaitReplicas.
func (b *Backend) execWait(ctx context.Context, sha, lua string, keys, args []string) (n, acked int64, err error) {
	waitCmd := func() rueidis.Completed {
		return b.c.B().Wait().Numreplicas(int64(b.opts.WaitReplicas)).Timeout(b.opts.WaitTimeout.Milliseconds()).Build().SetSlot(keys[0])
	}
	nk := int64(len(keys))
	var res []rueidis.RedisResult
	for i := 0; ; i++ { // again after another caller's context error (see runScript)
		res = b.c.DoMulti(ctx,
			b.c.B().Evalsha().Sha1(sha).Numkeys(nk).Key(keys...).Arg(args...).Build(),
			waitCmd())
		if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
			res = b.c.DoMulti(ctx,
				b.c.B().Eval().Script(lua).Numkeys(nk).Key(keys...).Arg(args...).Build(),
				waitCmd())
		}
		if i == foreignRetries || !foreignCancel(ctx, res[0].Error()) {
			break
		}
	}
	if n, err = res[0].AsInt64(); err != nil {
		return 0, 0, err
	}
	if n <= 0 {
		return n, 0, nil // nothing written: WAIT's answer does not matter
	}
	if acked, err = res[1].AsInt64(); err != nil {
		// Written but unconfirmed: report the error. For an acquire the
		// Locker releases the lock (cleanupAfter) as for any failed
		// attempt; for a renew it keeps its old deadline and retries.
		return 0, 0, err
	}
	return n, acked, nil
}

// Renew extends g's lease to ttl if g.Owner still holds g.Key: one round
// trip running internal/redisscript/renew.lua (followed by WAIT on the same connection
// with Options.WaitReplicas). Otherwise it changes nothing and returns
// an error wrapping [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if b.closed.Load() {
		return 0, errClosed("renew", g.Key)
	}
	a := b.ttl.Get(ttl)
	keys, args := b.keysOf(&g).acq[:1], []string{g.Owner, a.S}
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.execWait(ctx, renewSHA, renewLua, keys, args)
		if err == nil && n == 1 && acked < int64(b.opts.WaitReplicas) {
			// Applied on the primary but not confirmed on enough
			// replicas: not a renewal the Locker may count on.
			return 0, redisscript.Options(b.opts).NotReplicated("renew", g.Key, acked, nil)
		}
	} else {
		n, err = runScript(ctx, b.c, renewScript, keys, args).AsInt64()
	}
	if err != nil {
		return 0, wrap("renew", g.Key, err)
	}
	if n != 1 {
		return 0, redisscript.NotHeld("renew", g.Key)
	}
	return a.Duration(), nil
}

// Release deletes g.Key if g.Owner still holds it and publishes on the
// key's channel, waking waiters: one round trip running
// internal/redisscript/release.lua. If waiters of [FairBackend] are queued
// on the key, the same step hands the lock to the first live one instead
// (its lease, the next fence, and a message waking it alone). Otherwise it
// deletes nothing and returns an error wrapping [driver.ErrNotHeld].
// The fence counter is kept.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	if b.closed.Load() {
		return errClosed("release", g.Key)
	}
	// A plain release sends only what it needs (every key and argument
	// costs the server time): the lock, the fair queue and the fence
	// counter (for a hand-off), and the owner.
	keys := b.keysOf(&g).rel[:3]
	args := [3]string{g.Owner, "", ""}
	nargs := 1
	if b.sharded {
		args[1], nargs = "sharded", 2
	}
	if g.Fence == 0 {
		// A clean-up after an Acquire (or an AcquireWait) whose outcome is
		// unknown (a Grant of Key and Owner only): rueidis may still write
		// that request after this one, so the server also remembers the
		// owner and refuses its acquire if it arrives later, and the owner
		// leaves the fair queue.
		keys = keys[:4]
		args[2], nargs = abandonTTLms, 3
	}
	n, err := runScript(ctx, b.c, releaseScript, keys, args[:nargs]).AsInt64()
	if err != nil {
		return wrap("release", g.Key, err)
	}
	if n != 1 {
		return redisscript.NotHeld("release", g.Key)
	}
	return nil
}

// Inspect reports the state of key without changing it: whether it is
// held, the holder's remaining TTL, the last fence granted and the holder
// id ([driver.HolderID] of the stored owner token; the token itself is
// never returned).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if b.closed.Load() {
		return driver.Info{}, errClosed("inspect", key)
	}
	if err := redisscript.CheckInspectKey("inspect", key); err != nil {
		return driver.Info{}, err
	}
	lk := b.LockKey(key)
	vals, err := runScript(ctx, b.c, inspectScript, []string{lk, lk + fenceSuffix}, nil).ToArray()
	if err != nil {
		return driver.Info{}, wrap("inspect", key, err)
	}
	return redisscript.ReadInspect(key, values(vals))
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
	if b.closed.Load() {
		return 0, errClosed("retire fence", key)
	}
	if err := redisscript.CheckInspectKey("retire fence", key); err != nil {
		return 0, err
	}
	lk := b.LockKey(key)
	n, err := retireScript.Exec(ctx, b.c, []string{lk, lk + fenceSuffix}, nil).AsInt64()
	if err != nil {
		return 0, wrap("retire fence", key, err)
	}
	if n < 0 {
		return 0, redisscript.Held(key, n)
	}
	return fencing.Token(n), nil
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
	if b.hub != nil {
		b.hub.close()
	}
	b.hubsMu.Lock()
	hubs := b.hubs
	b.hubs = nil
	b.hubsMu.Unlock()
	for _, sh := range hubs {
		sh.h.close()
	}
	b.reclaim.Wait()
	return nil
}

// errTooManySlots is returned by hubFor when MaxShardedConns slots are
// watched already.
var errTooManySlots = errors.New("hash slots watched at once reach Options.MaxShardedConns")

// hubFor returns the hub that watches channel (the only one, or with
// ShardedPubSub the one of channel's hash slot) and a function to call
// once the watch made on it ends. With MaxShardedConns slots watched, it
// waits (bounded by ctx) for a hub that is closing, or fails at once if
// none is.
func (b *Backend) hubFor(ctx context.Context, channel string) (*hub, func(), error) {
	if !b.sharded {
		return b.hub, func() {}, nil
	}
	cmd := b.c.B().Ssubscribe().Channel(channel).Build()
	slot := cmd.Slot()
	b.hubsMu.Lock()
	defer b.hubsMu.Unlock()
	for {
		if b.hubs == nil {
			return nil, nil, driver.ErrClosed
		}
		sh := b.hubs[slot]
		if sh == nil && len(b.hubs)+b.closing < b.opts.MaxShardedConns {
			sh = &slotHub{h: newHub(b.c, b.opts.Logger, true)}
			b.hubs[slot] = sh
		}
		if sh != nil {
			sh.refs++
			return sh.h, func() { b.unref(slot, sh) }, nil
		}
		// Hubs still closing hold their connection: they count.
		if b.closing == 0 {
			return nil, nil, fmt.Errorf("%d %w", len(b.hubs), errTooManySlots)
		}
		freed := b.freed
		b.hubsMu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			b.hubsMu.Lock()
			return nil, nil, ctx.Err()
		}
		b.hubsMu.Lock()
	}
}

// unref ends one watch of sh; the last one removes the hub and closes it
// (its connection goes back to rueidis's pool, which unsubscribes it) in
// the background, so that stopping a watch does not wait for the server.
func (b *Backend) unref(slot uint16, sh *slotHub) {
	b.hubsMu.Lock()
	sh.refs--
	idle := sh.refs == 0 && b.hubs != nil && b.hubs[slot] == sh
	if idle {
		delete(b.hubs, slot)
		b.closing++
		b.reclaim.Add(1)
	}
	b.hubsMu.Unlock()
	if idle {
		go func() {
			defer b.reclaim.Done()
			sh.h.close()
			b.hubsMu.Lock()
			b.closing--
			close(b.freed)
			b.freed = make(chan struct{})
			b.hubsMu.Unlock()
			b.opts.Logger.Debug("redis: idle sharded subscription connection given back", "slot", slot)
		}()
	}
}

// Watch implements [driver.Notifier]: the returned channel receives a
// value when the release script publishes on key's channel (and when the
// subscription connection is lost, since a release may have been missed).
// All watches of a Backend share one subscription connection, with one
// SUBSCRIBE per channel however many waiters watch it. The subscription is
// confirmed by the server before Watch returns. stop must be called once.
// With Options.ShardedPubSub, watches use SSUBSCRIBE on the node
// serving the key's slot, one connection per slot watched at the moment
// (at most Options.MaxShardedConns: beyond, a Watch fails and the Locker
// falls back to the holder's TTL hint); a slot migrated
// away ends its sharded subscriptions on the server, after which waiters of
// that slot fall back to the holder's TTL hint until they watch again.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.closed.Load() {
		return nil, nil, errClosed("watch", key)
	}
	ch := b.Channel(key)
	h, unref, err := b.hubFor(ctx, ch)
	if errors.Is(err, driver.ErrClosed) {
		return nil, nil, errClosed("watch", key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	w, stop, err := h.watch(ctx, key, ch, "")
	if err != nil {
		unref()
		return nil, nil, err
	}
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			stop()
			unref()
		})
	}, nil
}
