package redis

//go:generate go run ../../internal/luagen -dir ../../internal/redisscript

import (
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
