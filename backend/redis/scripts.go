package redis

//go:generate go run ../../internal/luagen -dir ../../internal/redisscript

import (
	"context"
	"errors"

	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/rueidis"
)

// The generated scripts, shared with backend/goredis: one copy, in
// internal/redisscript. See internal/redisscript/*.lua for their KEYS,
// ARGV and replies.
var (
	acquireLua = redisscript.AcquireLua
	renewLua   = redisscript.RenewLua
)

// Names shared with the scripts (internal/redisnames).
const (
	fenceSuffix = redisscript.FenceSuffix
	// abandonedSuffix names the set of owners whose Acquire was cleaned
	// up (luagen AbandonedSuffix): lock key .. abandonedSuffix.
	abandonedSuffix = redisscript.AbandonedSuffix
	releasedSuffix  = redisscript.ReleasedSuffix
	queueSuffix     = redisscript.QueueSuffix
	grantedPrefix   = redisscript.GrantedPrefix
)

// abandonTTL is how long the server remembers an owner whose Acquire was
// cleaned up, refusing its requests that arrive later. A request rueidis
// still holds is written or failed within its write timeout, far less.
const abandonTTL = redisscript.AbandonTTL

var abandonTTLms = redisscript.AbandonTTLms

// Prebuilt scripts: the SHA-1 is computed once; Exec sends EVALSHA and
// falls back to EVAL on NOSCRIPT.
var (
	acquireScript     = rueidis.NewLuaScript(redisscript.AcquireLua)
	renewScript       = rueidis.NewLuaScript(redisscript.RenewLua)
	releaseScript     = rueidis.NewLuaScript(redisscript.ReleaseLua)
	inspectScript     = rueidis.NewLuaScript(redisscript.InspectLua)
	retireScript      = rueidis.NewLuaScript(redisscript.RetireLua)
	fencedWriteScript = rueidis.NewLuaScript(redisscript.FencedWriteLua)
	waitScript        = rueidis.NewLuaScript(redisscript.WaitLua)

	// acquireSHA is used when Acquire pipelines the script with WAIT.
	acquireSHA = redisscript.AcquireSHA
	// renewSHA is used when Renew pipelines the script with WAIT.
	renewSHA = redisscript.RenewSHA
)

// releaseKeys returns the KEYS of release.lua for the lock key lk: the
// lock, its fair queue, its fence counter and its abandoned set (the
// three derived names share one allocation).
func releaseKeys(lk string) []string {
	s := lk + queueSuffix + lk + fenceSuffix + lk + abandonedSuffix
	n := len(lk)
	q := n + len(queueSuffix)
	f := q + n + len(fenceSuffix)
	return []string{lk, s[:q], s[q:f], s[f:]}
}

// foreignRetries is how many times runScript runs a script again after it
// failed with another caller's context error (see runScript).
const foreignRetries = 3

// runScript runs s on c with keys and args, as s.Exec does, for the scripts
// that may run twice with the same effect (acquire, renew, release,
// inspect: an owner's acquire or renew repeated grants it the same, a
// release repeated finds nothing to delete).
//
// rueidis opens a connection lazily (at its first use, and again after
// one closed), and says HELLO on it, with the context of the command that
// needs it first; every command waiting for that connection gets the same
// error. A command whose own ctx is live can so fail with
// context.Canceled or context.DeadlineExceeded because another caller
// gave up, with nothing of it sent: a Lease's Release (or the Locker's
// clean-up after an acquire of unknown outcome) would leave its lock held
// for the whole TTL, and a renewal would be counted as failed. runScript runs
// such a command again, at most foreignRetries times; an error of ctx
// itself is returned as it is.
func runScript(ctx context.Context, c rueidis.Client, s *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	for i := 0; ; i++ {
		r := s.Exec(ctx, c, keys, args)
		if i == foreignRetries || !foreignCancel(ctx, r.Error()) {
			return r
		}
	}
}

// foreignCancel reports whether err is a context's error while ctx itself
// is live: the error of another caller's context (see runScript).
func foreignCancel(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}
