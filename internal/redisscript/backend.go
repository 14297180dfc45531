package redisscript

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// This file holds the client-independent half of the two Redis backends:
// their options and defaults, their errors, the guards' argument checks
// and the reading of replies once a backend has taken them out of its
// client's reply type. Each backend keeps only its client glue.

// DefaultMaxShardedConns bounds the subscription connections of
// ShardedPubSub when MaxShardedConns is zero.
const DefaultMaxShardedConns = 64

// maxSlots is the number of Redis Cluster hash slots: the most sharded
// subscription connections a backend can need.
const maxSlots = 16384

// Options are the options both backends take, field for field: each
// backend's Options has these same fields in this order (its documented
// copy), so that it converts to and from this type with a conversion.
type Options struct {
	KeyPrefix           string
	WaitReplicas        int
	WaitTimeout         time.Duration
	ShardedPubSub       bool
	MaxShardedConns     int
	AllowEvictingPolicy bool
	Logger              *slog.Logger
}

// Resolve checks o and fills in the defaults. An invalid option returns an
// error wrapping [driver.ErrInvalid].
func (o Options) Resolve() (Options, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return o, fmt.Errorf("redis: KeyPrefix %q contains '{' or '}': %w", o.KeyPrefix, driver.ErrInvalid)
	}
	if len(o.KeyPrefix) > MaxKeyPrefixLen {
		return o, fmt.Errorf("redis: KeyPrefix of %d bytes exceeds %d: %w", len(o.KeyPrefix), MaxKeyPrefixLen, driver.ErrInvalid)
	}
	if o.WaitReplicas < 0 {
		return o, fmt.Errorf("redis: WaitReplicas %d negative: %w", o.WaitReplicas, driver.ErrInvalid)
	}
	if o.WaitTimeout < 0 {
		return o, fmt.Errorf("redis: WaitTimeout %v negative: %w", o.WaitTimeout, driver.ErrInvalid)
	}
	if o.MaxShardedConns < 0 || o.MaxShardedConns > maxSlots {
		return o, fmt.Errorf("redis: MaxShardedConns %d outside 0..%d: %w", o.MaxShardedConns, maxSlots, driver.ErrInvalid)
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

// EvictionCheckTimeout bounds the INFO memory New sends to each node.
const EvictionCheckTimeout = 5 * time.Second

// WarnInfoRefused logs that addr refused INFO (an error reply): New goes on.
func (o Options) WarnInfoRefused(addr string, err error) {
	o.Logger.Warn("redis: cannot read maxmemory-policy (INFO refused); make sure it is noeviction, "+
		"or lock keys and fence counters may be evicted", "addr", addr, "err", err)
}

// CheckPolicy applies New's rule to info, the INFO memory reply of addr:
// noeviction passes; any other policy fails with an error wrapping
// [ErrEvictionPolicy], or is logged as a warning with AllowEvictingPolicy;
// a reply without the policy is logged as a warning.
func (o Options) CheckPolicy(addr, info string) error {
	policy, maxmemory := InfoField(info, "maxmemory_policy"), InfoField(info, "maxmemory")
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

// ReadInfoError is the error of New when addr could not be asked INFO.
func ReadInfoError(addr string, err error) error {
	return fmt.Errorf("redis: reading maxmemory-policy of %s: %w", addr, err)
}

// TTLArg is a lease TTL as the scripts take it: whole milliseconds,
// rounded up (the server never enforces less than asked).
type TTLArg struct {
	TTL time.Duration // as asked
	Ms  int64         // in milliseconds, at least 1
	S   string        // Ms in decimal
	Arg any           // S, boxed once (go-redis takes arguments as any)
}

// Duration is the TTL granted: Ms milliseconds.
func (a *TTLArg) Duration() time.Duration { return time.Duration(a.Ms) * time.Millisecond }

// TTLCache converts TTLs to a [TTLArg], reusing the last conversion: a
// Locker asks for the same TTL every time. The zero value is ready; it is
// safe for concurrent use.
type TTLCache struct{ last atomic.Pointer[TTLArg] }

// Get returns the TTLArg of ttl.
func (c *TTLCache) Get(ttl time.Duration) *TTLArg {
	if a := c.last.Load(); a != nil && a.TTL == ttl {
		return a
	}
	ms := max(int64((ttl+time.Millisecond-1)/time.Millisecond), 1)
	a := &TTLArg{TTL: ttl, Ms: ms, S: strconv.FormatInt(ms, 10)}
	a.Arg = a.S
	c.last.Store(a)
	return a
}

// ErrClosed is the error of op on key after the backend's Close.
func ErrClosed(op, key string) error {
	return fmt.Errorf("redis: %s %q: backend closed: %w", op, key, driver.ErrClosed)
}

// Wrap turns err, an error of a client or of a script, into the backends'
// error of op on key. clientClosed says that err is the client's "closed"
// error; reply that err is an error reply of the server (not the nil
// reply): its codes then decide what else it wraps.
func Wrap(op, key string, err error, clientClosed, reply bool) error {
	if clientClosed {
		return fmt.Errorf("redis: %s %q: client closed: %w: %w", op, key, driver.ErrClosed, err)
	}
	if reply {
		// Redis puts the code first; some compatible servers (miniredis)
		// wrap script errors, so look for it anywhere.
		msg := err.Error()
		if strings.Contains(msg, redisnames.AbandonedCode) {
			return fmt.Errorf("redis: %s %q: %w: the owner's attempt was cleaned up before it arrived: %w", op, key, driver.ErrNotAcquired, err)
		}
		if strings.Contains(msg, redisnames.ExhaustedCode) {
			// No retry can fix it: only an operator (another lock name).
			return permanentError{fmt.Errorf("redis: %s %q: %w (use another lock name; see MaxFence): %w", op, key, ErrFenceExhausted, err)}
		}
		if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, redisnames.CorruptCode) {
			return permanentError{fmt.Errorf("redis: %s %q: %w: %w", op, key, ErrCorrupt, err)}
		}
		// ACL and authentication refusals, of the request or inside a
		// script, last until an operator acts.
		if PermissionDenied(msg) {
			return permanentError{fmt.Errorf("redis: %s %q: %w", op, key, err)}
		}
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, err)
}

// permanentError marks an error no retry can fix: it also wraps
// [driver.ErrPermanent], without changing the message, so that the
// Locker gives up at once instead of retrying until its context ends.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{e.err, driver.ErrPermanent} }

// NotHeld is the error of a renew or release (op) of key the owner does
// not hold.
func NotHeld(op, key string) error {
	return fmt.Errorf("redis: %s %q: %w", op, key, driver.ErrNotHeld)
}

// Held is the error of an acquire or retire of key that another owner
// holds; n is the script's reply, minus the holder's remaining TTL in ms.
func Held(key string, n int64) error {
	return &driver.HeldError{Key: key, RetryAfter: time.Duration(-n) * time.Millisecond}
}

// Grant is the grant of an acquire of req whose script replied fence n.
func Grant(req driver.AcquireRequest, n int64, ttl *TTLArg) driver.Grant {
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(n), TTL: ttl.Duration()}
}

// NotReplicated is the error of op on key whose write acked replicas
// acknowledged within WaitTimeout, fewer than WaitReplicas; releaseErr, if
// not nil, is the error of releasing an acquired lock again.
func (o Options) NotReplicated(op, key string, acked int64, releaseErr error) error {
	err := fmt.Errorf("redis: %s %q: %d of %d replicas acknowledged within %v: %w",
		op, key, acked, o.WaitReplicas, o.WaitTimeout, ErrReplication)
	if releaseErr != nil {
		err = fmt.Errorf("%w; releasing it again failed: %w", err, releaseErr)
	}
	return err
}

// CheckInspectKey checks the key of an Inspect or RetireFence (op).
func CheckInspectKey(op, key string) error {
	if err := driver.ValidateKey(key); err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return nil
}

// Value is one value of a script reply, as a backend's client gives it.
type Value interface {
	// Text returns the value as a string; ok is false for a nil (Lua
	// false) value, err not nil for a value that is neither.
	Text() (s string, ok bool, err error)
	// Int returns the value as an integer.
	Int() (int64, error)
}

// ReadInspect reads vals, the reply of inspect.lua, as the Inspect of key.
func ReadInspect(key string, vals []Value) (driver.Info, error) {
	var info driver.Info
	if len(vals) != 3 {
		return info, fmt.Errorf("redis: inspect %q: unexpected reply of %d values", key, len(vals))
	}
	owner, held, err := vals[0].Text()
	if err != nil {
		return info, fmt.Errorf("redis: inspect %q: unexpected reply: %w", key, err)
	}
	if held {
		info.Held = true
		info.Holder = driver.HolderID(owner)
		if pttl, err := vals[1].Int(); err == nil && pttl > 0 {
			info.TTL = time.Duration(pttl) * time.Millisecond
		}
	}
	s, found, err := vals[2].Text()
	if err != nil {
		return driver.Info{}, fmt.Errorf("redis: inspect %q: unexpected reply: %w", key, err)
	}
	if found {
		f, ok := ParseFence(s)
		if !ok {
			return driver.Info{}, fmt.Errorf("redis: inspect %q: fence counter %q: %w", key, s, ErrCorrupt)
		}
		info.Fence = f
	}
	return info, nil
}

// Prepare is the client-independent part of the backends' New: a nil
// client (nilClient) or invalid options are an error wrapping
// [driver.ErrInvalid]; then checkEviction runs with the resolved
// options, bounded by EvictionCheckTimeout.
func Prepare(nilClient bool, o Options, checkEviction func(context.Context, Options) error) (Options, error) {
	if nilClient {
		return o, fmt.Errorf("redis: nil client: %w", driver.ErrInvalid)
	}
	o, err := o.Resolve()
	if err != nil {
		return o, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), EvictionCheckTimeout)
	defer cancel()
	return o, checkEviction(ctx, o)
}
