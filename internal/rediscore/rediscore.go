// Package rediscore is the Redis backend written once, for both clients:
// backend/redis (rueidis) and backend/goredis (go-redis) are adapters that
// implement [Conn] and [PubSub], the small contracts of the core, and build
// the core's types on them, the way database/sql builds on
// database/sql/driver. It imports no Redis client.
//
// The core holds the lock path ([Backend]: Acquire, Renew, Release,
// Inspect, RetireFence, ForceRelease, with WAIT after the script on one
// connection), the fair queue (Backend.AcquireWait: waiters queued on the
// server), the release wake-up hub ([Hubs], behind the adapters' Watch and
// the fair queue's waiters), the fenced store ([Store]: the guarded writes
// FencedSet, FencedHSet, FencedGet, FenceBarrier and the fencing.Store of
// issue 30) and the operator's force release. What differs per client
// (how a command, a pipeline or a subscription is sent, retries,
// contexts) stays in the adapter, behind [Conn] and [PubSub].
package rediscore

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Script is one of the generated scripts of internal/redisscript, with the
// SHA-1 digest that EVALSHA takes.
type Script struct {
	Lua string // the script's source, sent with EVAL after NOSCRIPT
	SHA string // its SHA-1 digest in hex, sent with EVALSHA

	// Again says that the script may run twice with the same effect: an
	// adapter may send it again after an error it knows came before
	// anything was sent (rueidis: another caller's context ending while
	// a connection opens).
	Again bool

	// Boxed holds SHA and Lua, each boxed into an any once, for a client
	// that takes a command as []any (go-redis): boxing a string
	// allocates.
	Boxed [2]any
}

// NewScript returns the Script of lua.
func NewScript(lua string) *Script { return newScript(lua, redisscript.SHA1Hex(lua), false) }

// newScript returns the Script of lua, whose SHA-1 is sha.
func newScript(lua, sha string, again bool) *Script {
	return &Script{Lua: lua, SHA: sha, Again: again, Boxed: [2]any{sha, lua}}
}

// The scripts of the core. Again marks those that may run twice with the
// same effect: an owner's acquire or renew repeated grants it the same, a
// release repeated finds nothing to delete, an inspect changes nothing; a
// retire repeated would report fence 0.
var (
	acquireScript      = newScript(redisscript.AcquireLua, redisscript.AcquireSHA, true)
	renewScript        = newScript(redisscript.RenewLua, redisscript.RenewSHA, true)
	releaseScript      = newScript(redisscript.ReleaseLua, redisscript.ReleaseSHA, true)
	inspectScript      = newScript(redisscript.InspectLua, redisscript.InspectSHA, true)
	retireScript       = newScript(redisscript.RetireLua, redisscript.RetireSHA, false)
	forceReleaseScript = newScript(redisscript.ForceReleaseLua, redisscript.ForceReleaseSHA, false)
	fenceBarrierScript = newScript(redisscript.FenceBarrierLua, redisscript.FenceBarrierSHA, false)
	fencedWriteScript  = newScript(redisscript.FencedWriteLua, redisscript.FencedWriteSHA, false)
	fencedUpdateScript = NewScript(redisscript.FencedUpdateLua)
	waitScript         = newScript(redisscript.WaitLua, redisscript.WaitSHA, false)
	proclaimScript     = NewScript(redisscript.ProclaimLua)
	leaderScript       = newScript(redisscript.LeaderLua, redisscript.SHA1Hex(redisscript.LeaderLua), true)
)

// Conn is what the core needs of a Redis client: the contract an adapter
// implements. Its methods are safe for concurrent use.
type Conn interface {
	// Eval runs s with keys and args: EVALSHA of s.SHA, then EVAL of
	// s.Lua if the server replied NOSCRIPT, each sent at most once (a
	// script whose reply was lost is not sent again). It returns the
	// script's array reply, or the client's error as it came.
	Eval(ctx context.Context, s *Script, keys, args []string) ([]redisscript.Value, error)

	// EvalInt runs s as Eval does, with c's Keys and Args (c.Argv is the
	// adapter's scratch space), and returns its integer reply.
	EvalInt(ctx context.Context, s *Script, c *Call) (int64, error)

	// EvalWait runs s with c as EvalInt does and WAIT replicas timeout
	// right behind it, in one round trip on one connection (WAIT counts
	// the writes of its own connection), EVAL again with WAIT after
	// NOSCRIPT. It returns the script's reply and, when that reply is
	// positive (the script wrote), WAIT's count; a written but
	// unconfirmed script returns WAIT's error.
	EvalWait(ctx context.Context, s *Script, c *Call, replicas int, timeout time.Duration) (n, acked int64, err error)

	// EvalIntsWait runs s with c as EvalInts does and WAIT replicas
	// timeout right behind it on one connection, as EvalWait does, for a
	// script whose reply alone says whether it wrote (a set's scripts).
	// It returns the script's reply, or its error as err; WAIT's count or
	// error are in the reply, for the core to read when the script wrote.
	EvalIntsWait(ctx context.Context, s *Script, c *Call, replicas int, timeout time.Duration) (Waited, error)

	// EvalInts runs s as EvalInt does, for a script whose reply is an
	// integer (n, vals nil) or an array of integers (vals, not nil).
	EvalInts(ctx context.Context, s *Script, c *Call) (n int64, vals []int64, err error)

	// HMGet reads fields of the hash key in one command; a field the hash
	// lacks (or a key that does not exist) is a nil value.
	HMGet(ctx context.Context, key string, fields []string) ([]redisscript.Value, error)

	// Wrap turns an error of the client, or an error reply, from the
	// command op on key into the backend's error (redisscript.Wrap).
	Wrap(op, key string, err error) error

	// Closed reports whether the backend was closed: the core then sends
	// nothing and returns redisscript.ErrClosed.
	Closed() bool
}

// Waited is the reply of [Conn.EvalIntsWait]: the script's reply as
// EvalInts returns it (N, or Vals when not nil), and WAIT's count Acked
// or its error WaitErr.
type Waited struct {
	N       int64
	Vals    []int64
	Acked   int64
	WaitErr error
}
