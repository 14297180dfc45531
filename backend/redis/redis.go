package redis

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
	"github.com/redis/rueidis"
)

// Defaults of [Options].
const (
	// DefaultKeyPrefix is prepended to every key and channel when
	// Options.KeyPrefix is empty.
	DefaultKeyPrefix = "fencedlock:"
	// DefaultWaitTimeout bounds WAIT when Options.WaitReplicas is set and
	// Options.WaitTimeout is zero.
	DefaultWaitTimeout = time.Second
	// MaxKeyPrefixLen is the longest KeyPrefix accepted, in bytes.
	MaxKeyPrefixLen = 256
)

var (
	// ErrCorrupt is wrapped by errors about a lock or fence key holding a
	// value fencedlock did not write: another type (WRONGTYPE), a fence
	// counter that is not a decimal counter, a lock without a TTL. Nothing
	// was changed on the server. The errors of Acquire, Renew and Release
	// that wrap it also wrap [fencedlock.ErrPermanent], as do ACL and
	// authentication refusals (NOPERM, NOAUTH, WRONGPASS).
	ErrCorrupt = errors.New("redis: key holds a value fencedlock did not write")
	// ErrReplication is wrapped by the error of an Acquire whose lock was
	// acknowledged by fewer than Options.WaitReplicas replicas within
	// Options.WaitTimeout. The lock was released again (token-checked).
	ErrReplication = errors.New("redis: too few replicas acknowledged")
)

// Options configures a [Backend]. The zero value means the documented
// defaults.
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
	// Waiters then use one subscription connection per hash slot they
	// have watched, kept open until Close.
	// Every backend sharing a store must use the same setting, or waiters
	// miss wake-ups and fall back to the holder's TTL hint. Default false:
	// PUBLISH and SUBSCRIBE, which work on every topology. It is not
	// turned on from the client's mode because rueidis also reports
	// cluster mode for servers that merely answer CLUSTER SLOTS (miniredis).
	ShardedPubSub bool

	// Logger receives debug records about subscriptions and reconnections
	// (keys and channel names, never owner tokens). Default: no logging.
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
	if o.WaitReplicas > 0 && o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Backend is a [fencedlock.Backend] on Redis. It also implements
// [fencedlock.Notifier] (waiters woken by the release script's PUBLISH) and
// [fencedlock.Inspector]. It is safe for concurrent use.
type Backend struct {
	c      rueidis.Client
	opts   Options
	closed atomic.Bool
	hub    *hub                   // nil when sharded: see hubs
	ttl    atomic.Pointer[ttlArg] // the last TTL argument, to avoid formatting it per call

	// sharded is Options.ShardedPubSub: release publishes with
	// SPUBLISH and watches use SSUBSCRIBE, one subscription connection
	// per hash slot watched (a sharded subscription must be made on the
	// node serving the channel's slot).
	sharded bool
	hubsMu  sync.Mutex
	hubs    map[uint16]*hub
}

var (
	_ fencedlock.Backend   = (*Backend)(nil)
	_ fencedlock.Notifier  = (*Backend)(nil)
	_ fencedlock.Inspector = (*Backend)(nil)
)

// New returns a Backend that uses client. It does not take ownership of
// client: [Backend.Close] leaves it open. Invalid options or a nil client
// return an error wrapping [fencedlock.ErrInvalid].
func New(client rueidis.Client, opts Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: nil client: %w", fencedlock.ErrInvalid)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	b := &Backend{c: client, opts: o}
	if o.ShardedPubSub {
		b.sharded = true
		b.hubs = make(map[uint16]*hub)
	} else {
		b.hub = newHub(client, o.Logger, false)
	}
	return b, nil
}

// Options returns the options in effect, defaults filled in.
func (b *Backend) Options() Options { return b.opts }

// escape writes '%', '{' and '}' of key as %25, %7B and %7D.
func escape(key string) string {
	if !strings.ContainsAny(key, "%{}") {
		return key
	}
	var sb strings.Builder
	sb.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			sb.WriteString("%25")
		case '{':
			sb.WriteString("%7B")
		case '}':
			sb.WriteString("%7D")
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// LockKey returns the Redis key of the lock named key: KeyPrefix + "{" +
// escaped key + "}" (see the package documentation). Pass it to
// scripts/release.lua to release a lock by hand.
func (b *Backend) LockKey(key string) string {
	return b.opts.KeyPrefix + "{" + escape(key) + "}"
}

// FenceKey returns the Redis key of the fence counter of key: LockKey(key)
// + ":fence". It shares LockKey's hash slot.
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + fenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + releasedSuffix }

type ttlArg struct {
	ttl time.Duration
	ms  int64
	s   string
}

// ttlArg converts ttl to whole milliseconds, rounded up (the server never
// enforces less than asked), reusing the last conversion.
func (b *Backend) ttlArg(ttl time.Duration) *ttlArg {
	if a := b.ttl.Load(); a != nil && a.ttl == ttl {
		return a
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	a := &ttlArg{ttl: ttl, ms: ms, s: strconv.FormatInt(ms, 10)}
	b.ttl.Store(a)
	return a
}

func errClosed(op, key string) error {
	return fmt.Errorf("redis: %s %q: backend closed: %w", op, key, fencedlock.ErrClosed)
}

// wrap turns an error of rueidis or of a script into the backend's error.
func wrap(op, key string, err error) error {
	if errors.Is(err, rueidis.ErrClosing) {
		return fmt.Errorf("redis: %s %q: client closed: %w: %w", op, key, fencedlock.ErrClosed, err)
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		// Redis puts the code first; some compatible servers (miniredis)
		// wrap script errors, so look for it anywhere.
		msg := re.Error()
		if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, corruptCode) {
			return permanentError{fmt.Errorf("redis: %s %q: %w: %w", op, key, ErrCorrupt, err)}
		}
		// ACL and authentication refusals last until an operator acts.
		for _, code := range []string{"NOPERM", "NOAUTH", "WRONGPASS"} {
			if strings.Contains(msg, code) {
				return permanentError{fmt.Errorf("redis: %s %q: %w", op, key, err)}
			}
		}
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, err)
}

// permanentError marks an error no retry can fix: it also wraps
// [fencedlock.ErrPermanent], without changing the message, so that the
// Locker gives up at once instead of retrying until its context ends.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{e.err, fencedlock.ErrPermanent} }

// Acquire makes one attempt to take req.Key: one round trip running
// scripts/acquire.lua (SET NX PX, then INCR of the fence counter). If
// another owner holds the key it returns a *[fencedlock.HeldError] with the
// holder's remaining TTL. A repeated request of the same owner that already
// holds the key (a retry whose first reply was lost) gets its fence again
// and a fresh TTL. With Options.WaitReplicas, WAIT follows the script on
// the same connection.
func (b *Backend) Acquire(ctx context.Context, req fencedlock.AcquireRequest) (fencedlock.Grant, error) {
	if b.closed.Load() {
		return fencedlock.Grant{}, errClosed("acquire", req.Key)
	}
	lk := b.LockKey(req.Key)
	keys := []string{lk, lk + fenceSuffix}
	ttl := b.ttlArg(req.TTL)
	args := []string{req.Owner, ttl.s}
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.acquireWait(ctx, keys, args)
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
		n, err = acquireScript.Exec(ctx, b.c, keys, args).AsInt64()
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
func (b *Backend) execWait(ctx context.Context, sha, lua string, keys, args []string) (n, acked int64, err error) {
	waitCmd := func() rueidis.Completed {
		return b.c.B().Wait().Numreplicas(int64(b.opts.WaitReplicas)).Timeout(b.opts.WaitTimeout.Milliseconds()).Build().SetSlot(keys[0])
	}
	nk := int64(len(keys))
	res := b.c.DoMulti(ctx,
		b.c.B().Evalsha().Sha1(sha).Numkeys(nk).Key(keys...).Arg(args...).Build(),
		waitCmd())
	if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
		res = b.c.DoMulti(ctx,
			b.c.B().Eval().Script(lua).Numkeys(nk).Key(keys...).Arg(args...).Build(),
			waitCmd())
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
// trip running scripts/renew.lua (followed by WAIT on the same connection
// with Options.WaitReplicas). Otherwise it changes nothing and returns
// an error wrapping [fencedlock.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g fencedlock.Grant, ttl time.Duration) (time.Duration, error) {
	if b.closed.Load() {
		return 0, errClosed("renew", g.Key)
	}
	a := b.ttlArg(ttl)
	keys, args := []string{b.LockKey(g.Key)}, []string{g.Owner, a.s}
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
			return 0, fmt.Errorf("redis: renew %q: %d of %d replicas acknowledged within %v: %w",
				g.Key, acked, b.opts.WaitReplicas, b.opts.WaitTimeout, ErrReplication)
		}
	} else {
		n, err = renewScript.Exec(ctx, b.c, keys, args).AsInt64()
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
// key's channel, waking waiters: one round trip running
// scripts/release.lua. Otherwise it deletes nothing and returns an error
// wrapping [fencedlock.ErrNotHeld]. The fence counter is kept.
func (b *Backend) Release(ctx context.Context, g fencedlock.Grant) error {
	if b.closed.Load() {
		return errClosed("release", g.Key)
	}
	args := []string{g.Owner}
	if b.sharded {
		args = append(args, "sharded")
	}
	n, err := releaseScript.Exec(ctx, b.c, []string{b.LockKey(g.Key)}, args).AsInt64()
	if err != nil {
		return wrap("release", g.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("redis: release %q: %w", g.Key, fencedlock.ErrNotHeld)
	}
	return nil
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
	vals, err := inspectScript.Exec(ctx, b.c, []string{lk, lk + fenceSuffix}, nil).ToArray()
	if err != nil {
		return fencedlock.Info{}, wrap("inspect", key, err)
	}
	if len(vals) != 3 {
		return fencedlock.Info{}, fmt.Errorf("redis: inspect %q: unexpected reply of %d values", key, len(vals))
	}
	var info fencedlock.Info
	if owner, err := vals[0].ToString(); err == nil {
		info.Held = true
		info.Holder = fencedlock.HolderID(owner)
		if pttl, err := vals[1].AsInt64(); err == nil && pttl > 0 {
			info.TTL = time.Duration(pttl) * time.Millisecond
		}
	}
	if s, err := vals[2].ToString(); err == nil {
		f, ok := parseFence(s)
		if !ok {
			return fencedlock.Info{}, fmt.Errorf("redis: inspect %q: fence counter %q: %w", key, s, ErrCorrupt)
		}
		info.Fence = f
	}
	return info, nil
}

// maxFenceDigits is the longest fence counter the scripts accept (luagen
// MaxFenceDigits): below 2^53, so exact in Lua numbers.
const maxFenceDigits = 15

// parseFence applies the acquire script's rule for a fence counter: "0" or
// a decimal without sign or leading zero, at most maxFenceDigits digits.
func parseFence(s string) (fencing.Token, bool) {
	if s == "" || len(s) > maxFenceDigits || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return fencing.Token(v), true
}

// Close ends the backend's subscriptions and goroutines. It does not close
// the rueidis client. It is idempotent; other calls after Close return
// errors wrapping [fencedlock.ErrClosed].
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
	for _, h := range hubs {
		h.close()
	}
	return nil
}

// hubFor returns the hub that watches channel: the only one, or on a
// cluster the one of channel's hash slot.
func (b *Backend) hubFor(channel string) (*hub, error) {
	if !b.sharded {
		return b.hub, nil
	}
	cmd := b.c.B().Ssubscribe().Channel(channel).Build()
	slot := cmd.Slot()
	b.hubsMu.Lock()
	defer b.hubsMu.Unlock()
	if b.hubs == nil {
		return nil, fencedlock.ErrClosed
	}
	h := b.hubs[slot]
	if h == nil {
		h = newHub(b.c, b.opts.Logger, true)
		b.hubs[slot] = h
	}
	return h, nil
}

// Watch implements [fencedlock.Notifier]: the returned channel receives a
// value when the release script publishes on key's channel (and when the
// subscription connection is lost, since a release may have been missed).
// All watches of a Backend share one subscription connection, with one
// SUBSCRIBE per channel however many waiters watch it. The subscription is
// confirmed by the server before Watch returns. stop must be called once.
// With Options.ShardedPubSub, watches use SSUBSCRIBE on the node
// serving the key's slot, one connection per slot watched; a slot migrated
// away ends its sharded subscriptions on the server, after which waiters of
// that slot fall back to the holder's TTL hint until they watch again.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.closed.Load() {
		return nil, nil, errClosed("watch", key)
	}
	ch := b.Channel(key)
	h, err := b.hubFor(ch)
	if err != nil {
		return nil, nil, errClosed("watch", key)
	}
	return h.watch(ctx, key, ch)
}
