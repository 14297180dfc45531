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
// [Options.ShardedPubSub]). This package imports neither rueidis nor etcd.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fencedlock/fencedlock/driver"
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

// The commands of the hot paths, each in one allocation with its string
// arguments and the bytes of its keys: go-redis takes *string arguments,
// which box into an any without allocating, where each string would
// allocate; and the keys are built into buf (see concat) when they fit.
type (
	acquireCall struct {
		cmd               [8]any
		lk, fk, ak, owner string
		buf               [192]byte
	}
	renewCall struct {
		cmd       [6]any
		lk, owner string
		buf       [96]byte
	}
	releaseCall struct {
		cmd                [10]any
		lk, ab, q, f       string
		owner, mode, aband string
		buf                [256]byte
	}
)

// concat returns the concatenation of parts. If it fits in buf it is
// written there and the string shares buf's memory (no allocation): buf
// must not be written again while the string is in use, and the struct
// holding buf stays alive as long as the string does. Otherwise it
// allocates.
func concat(buf []byte, parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > len(buf) || n == 0 {
		return strings.Join(parts, "")
	}
	b := buf[:0]
	for _, p := range parts {
		b = append(b, p...)
	}
	return unsafe.String(unsafe.SliceData(b), n)
}

// run sends s as EVALSHA and, on NOSCRIPT, as EVAL. cmd is the whole
// command with two slots first for the command name and the script:
// nil, nil, numkeys, keys..., args... (one slice, so that a call
// allocates it once).
func (b *Backend) run(ctx context.Context, s script, cmd []any) *redis.Cmd {
	return runAs(ctx, b, s, cmd, redis.NewCmd, onceOf)
}

// runInt is run for a script that replies with an integer, read as an
// int64: a *redis.Cmd boxes it into an any, which allocates from 256 up
// (fences, for a start).
func (b *Backend) runInt(ctx context.Context, s script, cmd []any) (int64, error) {
	return runAs(ctx, b, s, cmd, redis.NewIntCmd, onceIntOf).Result()
}

// runAs sends the script as run does, each command as once(command): go-redis
// does not send it again after a failure.
func runAs[C redis.Cmder](ctx context.Context, b *Backend, s script, cmd []any, newCmd func(context.Context, ...any) C, once func(C) redis.Cmder) C {
	cmd[0], cmd[1] = "evalsha", s.sha
	r := newCmd(ctx, cmd...)
	if err := b.process(ctx, once(r)); err != nil {
		return abandoned(ctx, err, newCmd)
	}
	if isNoScript(r.Err()) {
		cmd[0], cmd[1] = "eval", s.lua
		r = newCmd(ctx, cmd...)
		if err := b.process(ctx, once(r)); err != nil {
			return abandoned(ctx, err, newCmd)
		}
	}
	return r
}

// onceCmd and onceIntCmd are script commands that go-redis must send at most
// once (their NoRetry is true). go-redis sends a command again after a
// network error (up to the client's MaxRetries), also when the command was
// written and only its reply was lost: the server may then have run the
// script already. A release sent again finds the lock it deleted gone and
// replies "not held", which would tell the caller that it lost the lease it
// released. So the first attempt's error is returned instead, an unknown
// outcome (the Locker cleans up after an acquire whose outcome it cannot
// know). go-redis still replays a command that never reached the wire, and
// follows MOVED and ASK (the server did not run it).
type (
	onceCmd    struct{ *redis.Cmd }
	onceIntCmd struct{ *redis.IntCmd }
)

// NoRetry implements redis.Cmder: the command is not sent again.
func (onceCmd) NoRetry() bool { return true }

// NoRetry implements redis.Cmder: the command is not sent again.
func (onceIntCmd) NoRetry() bool { return true }

func onceOf(c *redis.Cmd) redis.Cmder       { return onceCmd{c} }
func onceIntOf(c *redis.IntCmd) redis.Cmder { return onceIntCmd{c} }

// abandoned returns a command failed with err, the error of ctx, in place
// of the one process gave up on, which the autopipeliner may still write
// and fill in (it must not be read nor its arguments changed). That
// command's outcome is unknown: the Locker's clean-up (a release with the
// abandon mark) makes it take nothing if it arrives later.
func abandoned[C redis.Cmder](ctx context.Context, err error, newCmd func(context.Context, ...any) C) C {
	c := newCmd(ctx)
	c.SetErr(err)
	return c
}

// process sends one command; its outcome is c's. While at most as many
// commands of this backend are in flight as the client has pooled
// connections, it goes out on its own pooled connection as go-redis's Do
// sends it: one round trip, on the caller's goroutine. Beyond that (it
// would wait for a connection) it goes through the client's autopipeliner
// (go-redis's AutoPipeline), which writes the commands waiting at that
// moment as one pipeline on one connection: one write and one read instead
// of one per command, on the client and on the server. (Below the pool size
// the autopipeliner is slower: it sends one batch at a time, and hands each
// command to its own goroutine and back.)
//
// The blocking autopipeliner ignores the context of a queued command, so a
// client with ContextTimeoutEnabled (which asks for contexts to bound
// commands) gets the deferred one (AsyncAutoPipeline) instead, whose wait
// ends with ctx. process then returns ctx's error, and c, still queued or
// in flight, must be left alone: it may still be written and run.
//
// A client without ContextTimeoutEnabled (go-redis's default) bounds a
// command by its own timeouts only (ReadTimeout, WriteTimeout, retries),
// not by ctx: a Release to a stopped server took 5 s whatever the Locker's
// ReleaseTimeout. With a ctx that can end, process then sends c on a
// goroutine of its own and returns ctx's error when ctx ends first (see
// untilDone), c left alone as above.
func (b *Backend) process(ctx context.Context, c redis.Cmder) error {
	if b.ctxTimeouts || ctx.Done() == nil {
		return b.send(ctx, c)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.send(ctx, c)
	}()
	return untilDone(ctx, done)
}

// untilDone waits until done is closed (nil) or ctx ends first (ctx's
// error): the goroutine that closes done, sending a command on a client
// whose commands do not end with ctx, then goes on alone, and what it
// writes must not be read.
func untilDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both: the reply is there
			return nil
		default:
			return ctx.Err()
		}
	}
}

// send sends c as process describes, on the caller's goroutine when the
// client's commands end with their ctx (or ctx cannot end), else on the
// goroutine process starts for it.
func (b *Backend) send(ctx context.Context, c redis.Cmder) error {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) > b.direct {
		if ap := b.pipeliner(); ap != nil {
			if !b.ctxTimeouts {
				_ = ap.Process(ctx, c)
				return nil
			}
			err := ap.Submit(ctx, c).WaitContext(ctx)
			if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				return err
			}
			return nil
		}
	}
	_ = b.c.Process(ctx, c)
	return nil
}

// pipeliner returns the client's autopipeliner (see process), asked for
// once (at the first concurrent command); nil if the client has none to
// give (then every command goes out alone).
func (b *Backend) pipeliner() *redis.AutoPipeliner {
	b.apOnce.Do(func() {
		var (
			ap  *redis.AutoPipeliner
			err error
		)
		if b.ctxTimeouts {
			ap, err = b.c.AsyncAutoPipeline()
		} else {
			ap, err = b.c.AutoPipeline()
		}
		if err != nil || ap == nil || ap.IsBlocking() == b.ctxTimeouts {
			if b.opts.Logger != nil {
				b.opts.Logger.Debug("goredis: no autopipeliner; commands go out one per connection", "err", err)
			}
			return
		}
		b.ap = ap
	})
	return b.ap
}

// isNoScript reports whether err is the server's NOSCRIPT reply. It tests
// for nil first: redis.HasErrorPrefix allocates on every call, nil or not
// (one allocation per command on the hot path).
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Backend is a [driver.Backend] on Redis through go-redis. It also
// implements [driver.Notifier] and [driver.Inspector]. It is safe
// for concurrent use.
type Backend struct {
	c      redis.UniversalClient
	opts   Options
	closed atomic.Bool
	ttl    redisscript.TTLCache

	inflight    atomic.Int32         // commands of process in flight
	direct      int32                // process sends at most this many in flight directly: the client's pool size
	ctxTimeouts bool                 // the client's ContextTimeoutEnabled: process honours ctx in the autopipeliner too
	apOnce      sync.Once            // sets ap
	ap          *redis.AutoPipeliner // the client's; nil: none

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
func New(client redis.UniversalClient, opts Options) (*Backend, error) {
	ro, err := redisscript.Prepare(client == nil, redisscript.Options(opts), func(ctx context.Context, o redisscript.Options) error {
		return checkEviction(ctx, client, o)
	})
	if err != nil {
		return nil, err
	}
	o := Options(ro)
	b := &Backend{c: client, opts: o, direct: poolSize(client), ctxTimeouts: contextTimeouts(client)}
	if o.ShardedPubSub {
		b.hubs = make(map[uint16]*slotHub)
	}
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
func (b *Backend) FenceKey(key string) string { return b.LockKey(key) + redisscript.FenceSuffix }

// Channel returns the Pub/Sub channel the release script publishes on for
// key: LockKey(key) + ":released".
func (b *Backend) Channel(key string) string { return b.LockKey(key) + redisscript.ReleasedSuffix }

func errClosed(op, key string) error { return redisscript.ErrClosed(op, key) }

// wrap turns an error of go-redis or of a script into the backend's error
// (redisscript.Wrap, as backend/redis does).
func wrap(op, key string, err error) error {
	return redisscript.Wrap(op, key, err, errors.Is(err, redis.ErrClosed), isRedisErr(err))
}

// Acquire makes one attempt to take req.Key: one round trip running
// acquire.lua (SET NX PX, then INCR of the fence counter). If another
// owner holds the key it returns a *[driver.HeldError] with the
// holder's remaining TTL. A repeated request of the same owner that
// already holds the key gets its fence again and a fresh TTL. With
// Options.WaitReplicas, WAIT follows the script on the same connection.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if b.closed.Load() {
		return driver.Grant{}, errClosed("acquire", req.Key)
	}
	// The three keys are substrings of one string, in c's buf: lock key
	// + FenceSuffix + lock key + AbandonedSuffix.
	c := &acquireCall{owner: req.Owner}
	p, esc := b.opts.KeyPrefix, redisscript.Escape(req.Key)
	keys := concat(c.buf[:], p, "{", esc, "}", redisscript.FenceSuffix, p, "{", esc, "}", redisscript.AbandonedSuffix)
	lk := keys[:len(p)+len(esc)+2]
	fk := keys[:len(lk)+len(redisscript.FenceSuffix)]
	c.lk, c.fk, c.ak = lk, fk, keys[len(fk):]
	ttl := b.ttl.Get(req.TTL)
	c.cmd = [...]any{nil, nil, 3, &c.lk, &c.fk, &c.ak, &c.owner, ttl.Arg}
	cmd := c.cmd[:]
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.execWait(ctx, acquireScript, lk, cmd)
		if err == nil && n > 0 && acked < int64(b.opts.WaitReplicas) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.DefaultReleaseTimeout)
			rerr := b.Release(rctx, driver.Grant{Key: req.Key, Owner: req.Owner})
			cancel()
			return driver.Grant{}, redisscript.Options(b.opts).NotReplicated("acquire", req.Key, acked, rerr)
		}
	} else {
		n, err = b.runInt(ctx, acquireScript, cmd)
	}
	if err != nil {
		return driver.Grant{}, wrap("acquire", req.Key, err)
	}
	if n <= 0 {
		return driver.Grant{}, redisscript.Held(req.Key, n)
	}
	return redisscript.Grant(req, n, ttl), nil
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
		sc := redis.NewCmd(ctx, cmd...)
		_ = p.Process(ctx, onceCmd{sc}) // go-redis sends no pipeline with it again (see onceCmd)
		wc := p.Do(ctx, "wait", b.opts.WaitReplicas, waitMs)
		_, _ = p.Exec(ctx) // the errors are read from each command
		return sc, wc
	}
	var sc, wc *redis.Cmd
	// Exec does not end with ctx on a client without ContextTimeoutEnabled
	// (see process).
	send := func() {
		sc, wc = run(false)
		if isNoScript(sc.Err()) {
			sc, wc = run(true)
		}
	}
	if b.ctxTimeouts || ctx.Done() == nil {
		send()
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			send()
		}()
		if err := untilDone(ctx, done); err != nil {
			return 0, 0, err // sc and wc are send's: left alone
		}
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
// wrapping [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if b.closed.Load() {
		return 0, errClosed("renew", g.Key)
	}
	a := b.ttl.Get(ttl)
	c := &renewCall{owner: g.Owner}
	c.lk = concat(c.buf[:], b.opts.KeyPrefix, "{", redisscript.Escape(g.Key), "}") // LockKey, in c's buf
	c.cmd = [...]any{nil, nil, 1, &c.lk, &c.owner, a.Arg}
	lk, cmd := c.lk, c.cmd[:]
	var (
		n   int64
		err error
	)
	if b.opts.WaitReplicas > 0 {
		var acked int64
		n, acked, err = b.execWait(ctx, renewScript, lk, cmd)
		if err == nil && n == 1 && acked < int64(b.opts.WaitReplicas) {
			return 0, redisscript.Options(b.opts).NotReplicated("renew", g.Key, acked, nil)
		}
	} else {
		n, err = b.runInt(ctx, renewScript, cmd)
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
// key's channel, waking waiters: one round trip running release.lua. If
// waiters of backend/redis's FairBackend are queued on the key, the same
// step hands the lock to the first live one instead. Otherwise it deletes nothing and returns an error wrapping
// [driver.ErrNotHeld]. The fence counter is kept. A Grant with Fence 0
// (the Locker's clean-up after an Acquire whose outcome is unknown) also
// makes the server remember the owner for 5 minutes and refuse its
// acquire if that arrives later, as in backend/redis.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	if b.closed.Load() {
		return errClosed("release", g.Key)
	}
	// KEYS: the lock, its fair queue, its fence counter and (a clean-up
	// only) its abandoned set, substrings of one string, in c's buf: a
	// release hands the lock to the first live waiter of backend/redis's
	// FairBackend queued on it, as backend/redis's release does. A plain
	// release sends only the first three keys and the owner (every key and
	// argument costs the server time).
	c := &releaseCall{owner: g.Owner}
	p, esc := b.opts.KeyPrefix, redisscript.Escape(g.Key)
	s := concat(c.buf[:], p, "{", esc, "}", redisscript.QueueSuffix,
		p, "{", esc, "}", redisscript.FenceSuffix,
		p, "{", esc, "}", redisscript.AbandonedSuffix)
	n0 := len(p) + len(esc) + 2 // the lock key
	q := n0 + len(redisscript.QueueSuffix)
	f := q + n0 + len(redisscript.FenceSuffix)
	c.lk, c.q, c.f, c.ab = s[:n0], s[:q], s[q:f], s[f:]
	c.cmd = [...]any{nil, nil, 3, &c.lk, &c.q, &c.f, &c.owner, &c.mode, &c.aband, nil}
	cmd := c.cmd[:7]
	if b.opts.ShardedPubSub {
		c.mode = "sharded"
		cmd = c.cmd[:8]
	}
	if g.Fence == 0 {
		// A clean-up after an Acquire whose outcome is unknown (a Grant
		// of Key and Owner only): go-redis may still write that request
		// after this one, so the server also remembers the owner and
		// refuses its acquire if it arrives later.
		c.aband = redisscript.AbandonTTLms
		c.cmd = [...]any{nil, nil, 4, &c.lk, &c.q, &c.f, &c.ab, &c.owner, &c.mode, &c.aband}
		cmd = c.cmd[:]
	}
	n, err := b.runInt(ctx, releaseScript, cmd)
	if err != nil {
		return wrap("release", g.Key, err)
	}
	if n != 1 {
		return redisscript.NotHeld("release", g.Key)
	}
	return nil
}

// value is a value of a go-redis reply, read by internal/redisscript.
type value struct{ v any }

func (v value) Text() (string, bool, error) {
	switch x := v.v.(type) {
	case string:
		return x, true, nil
	case []byte:
		return string(x), true, nil
	case int64:
		return strconv.FormatInt(x, 10), true, nil
	case nil:
		return "", false, nil
	case error:
		return "", false, x
	}
	return "", false, fmt.Errorf("unexpected reply value of type %T", v.v)
}

func (v value) Int() (int64, error) {
	if n, ok := v.v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("unexpected reply value of type %T, want an integer", v.v)
}

// values wraps a go-redis reply for internal/redisscript.
func values(vals []any) []redisscript.Value {
	out := make([]redisscript.Value, len(vals))
	for i, v := range vals {
		out[i] = value{v}
	}
	return out
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
	vals, err := b.run(ctx, inspectScript, []any{nil, nil, 2, lk, lk + redisscript.FenceSuffix}).Slice()
	if err != nil {
		return driver.Info{}, wrap("inspect", key, err)
	}
	return redisscript.ReadInspect(key, values(vals))
}

// RetireFence deletes the fence counter of key if key is not held, in one
// step (retire.lua), and returns the last fence granted (0 if there was no
// counter). If key is held it changes nothing and returns a
// *[driver.HeldError]; a key fencedlock did not write returns an error
// wrapping [ErrCorrupt]. After it, a new Acquire of key starts again at
// fence 1: see backend/redis.Backend.RetireFence for when that is safe.
func (b *Backend) RetireFence(ctx context.Context, key string) (fencing.Token, error) {
	if b.closed.Load() {
		return 0, errClosed("retire fence", key)
	}
	if err := redisscript.CheckInspectKey("retire fence", key); err != nil {
		return 0, err
	}
	lk := b.LockKey(key)
	n, err := b.runInt(ctx, retireScript, []any{nil, nil, 2, lk, lk + redisscript.FenceSuffix})
	if err != nil {
		return 0, wrap("retire fence", key, err)
	}
	if n < 0 {
		return 0, redisscript.Held(key, n)
	}
	return fencing.Token(n), nil
}

// Close ends the backend's subscriptions and goroutines. It does not close
// the go-redis client, nor the client's autopipeliner (which the client's
// Close ends). It is idempotent; other calls after Close return
// errors wrapping [driver.ErrClosed].
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
