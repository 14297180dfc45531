package redis

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/rueidis"
)

// Fields of a guarded hash (see [Backend.FencedSet] and [Backend.FencedHSet]).
const (
	// ValueField is the field of the hash written by FencedSet.
	ValueField = redisscript.ValueField
	// FenceField holds the highest token accepted for the hash, in decimal.
	FenceField = redisscript.FenceField
	// HolderField holds the holder id that presented FenceField's token.
	HolderField = redisscript.HolderField
)

// FencedSet writes value to key, a Redis hash of yours, only if the fencing
// rule ([fencing.Check]) accepts token from holder: token greater than the
// highest token accepted for key, or equal to it and from the same holder.
// The check and the write are one step (internal/redisscript/fenced_write.lua), so no
// other write can come between them. The hash holds the value in field
// [ValueField] and the fence record in [FenceField] and [HolderField];
// read it back with [Backend.FencedGet].
//
// A rejected write returns an error wrapping a *[fencing.StaleError] (and so
// [fencing.ErrStale]) carrying the accepted token and holder id, and writes
// nothing. A zero token returns an error wrapping [fencing.ErrInvalidToken];
// an empty key or holder, or a key inside the backend's KeyPrefix, an error
// wrapping [driver.ErrInvalid]; nothing is sent. A key that is not a
// hash, or a fence record fencedlock did not write, returns an error
// wrapping [ErrCorrupt] and changes nothing.
//
// The guard needs one key, so it works on Redis Cluster for any key. Pass
// the lease's fence and holder id: lease.Fence(), lease.Holder(). The fence
// record is never deleted by this package; delete the hash yourself when
// the resource is gone (a later write then starts a new record).
func (b *Backend) FencedSet(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return b.store.Set(ctx, key, value, token, holder)
}

// FencedHSet sets fields of key, a Redis hash of yours, only if the fencing
// rule accepts token from holder, exactly as [Backend.FencedSet] does: the
// check, the fields and the new fence record are written in one step, and
// a rejection (an error wrapping a *[fencing.StaleError]) writes nothing.
// fields must hold at least one field and must not name [FenceField] or
// [HolderField]; other fields of the hash are left as they are. The
// script passes all fields to one HSET, so keep a call to at most a few
// thousand fields (Lua's stack bounds the arguments of one call).
func (b *Backend) FencedHSet(ctx context.Context, key string, fields map[string]string, token fencing.Token, holder string) error {
	return b.store.HSet(ctx, key, fields, token, holder)
}

// FencedGet reads a hash written by [Backend.FencedSet] in one round trip:
// the value (Found false if the hash has no [ValueField]) and the highest
// token accepted for key with its holder id (0 and "" if none yet). It is
// [Store.Get] of [NewStore](b).
func (b *Backend) FencedGet(ctx context.Context, key string) (fencing.Record, error) {
	return b.store.Get(ctx, key)
}

// fencedEvalPreamble is the guard that [FencedScript] runs before the
// user's body, in the same script: the rule of scripts/fenced_write.lua
// (token greater than the stored fence, or equal to it from the same
// holder; the token a uint64 in decimal, checked as a string), on the fence
// record of KEYS[1] (fields FenceField and HolderField, as FencedSet keeps
// them). An accepted token is recorded before the body runs; a rejected
// one returns the error FENCEDLOCK_STALE <fence> <holder> and runs nothing.
// ARGV[1] is the token, ARGV[2] the holder id.
const fencedEvalPreamble = `-- fencedlock guard (backend/redis FencedScript)
local fencedlock_FENCE, fencedlock_HOLDER = 'fencedlock:fence', 'fencedlock:holder'
local fencedlock_MAX = '18446744073709551615'
local function fencedlock_isToken(s)
  if type(s) ~= 'string' or #s > #fencedlock_MAX or string.match(s, '^[1-9]%d*$') == nil then
    return false
  end
  return #s < #fencedlock_MAX or s <= fencedlock_MAX
end
local fencedlock_token, fencedlock_holder = ARGV[1], ARGV[2]
if not fencedlock_isToken(fencedlock_token) then
  return redis.error_reply('ERR fencedlock: fenced eval: the token is not a fencing token (a decimal from 1 to ' ..
    fencedlock_MAX .. ', no sign, no leading zero); nothing written')
end
if KEYS[1] == nil or fencedlock_holder == nil or fencedlock_holder == '' then
  return redis.error_reply('ERR fencedlock: fenced eval needs a guarded key, a token and a holder id')
end
local fencedlock_rec = redis.call('HMGET', KEYS[1], fencedlock_FENCE, fencedlock_HOLDER)
local fencedlock_fence, fencedlock_owner = fencedlock_rec[1], fencedlock_rec[2]
if fencedlock_fence then
  if not fencedlock_isToken(fencedlock_fence) or not fencedlock_owner then
    return redis.error_reply('FENCEDLOCK_CORRUPT hash ' .. KEYS[1] .. ' holds a fence record fencedlock did not write')
  end
  local older
  if #fencedlock_token ~= #fencedlock_fence then
    older = #fencedlock_token < #fencedlock_fence
  else
    older = fencedlock_token < fencedlock_fence
  end
  if older or (fencedlock_token == fencedlock_fence and fencedlock_holder ~= fencedlock_owner) then
    return redis.error_reply('FENCEDLOCK_STALE ' .. fencedlock_fence .. ' ' .. fencedlock_owner)
  end
end
redis.call('HSET', KEYS[1], fencedlock_FENCE, fencedlock_token, fencedlock_HOLDER, fencedlock_holder)
local fencedlock_keys, fencedlock_argv = {}, {}
for i = 2, #KEYS do
  fencedlock_keys[i - 1] = KEYS[i]
end
for i = 3, #ARGV do
  fencedlock_argv[i - 2] = ARGV[i]
end
return (function(KEYS, ARGV)
`

// fencedEvalEnd closes the function around the user's body.
const fencedEvalEnd = "\nend)(fencedlock_keys, fencedlock_argv)\n"

// staleCode is the error code of a token the guard of a FencedScript
// rejected.
const staleCode = "FENCEDLOCK_STALE"

// A FencedScript is a Lua body of yours run behind the fencing guard, in
// one script: the guard (the rule of [Backend.FencedSet]) checks the
// lease's token against the fence record of a guarded hash and records it,
// then your body runs, on the same server, with nothing between them. Make
// one with [Backend.NewFencedScript] once and reuse it; it is safe for
// concurrent use.
type FencedScript struct {
	b      *Backend
	script *rueidis.Lua
}

// NewFencedScript returns a FencedScript running body behind the guard.
// body is the text of a Lua function body, exactly as you would write a
// script for EVAL, with its own KEYS and ARGV: KEYS[1] of your body is the
// first of the keys you pass to Exec and ARGV[1] the first of your args
// (the guarded key, token and holder id are taken off before your body
// sees them). Its return value is Exec's reply. The guard's locals are
// named fencedlock_*; do not rely on them.
//
// The whole script is sent as EVALSHA (EVAL the first time), so the
// server caches it by its SHA-1 like any other script.
func (b *Backend) NewFencedScript(body string) *FencedScript {
	return &FencedScript{b: b, script: rueidis.NewLuaScript(fencedEvalPreamble + body + fencedEvalEnd)}
}

// Exec runs the guard and then the body, as one script, with
//
//	KEYS = key, keys...           (your body sees keys... as KEYS)
//	ARGV = token, holder, args... (your body sees args... as ARGV)
//
// key is the guarded hash: its fence record is kept in fields [FenceField]
// and [HolderField], exactly as FencedSet keeps it, so FencedSet,
// FencedHSet, FencedGet and FencedScripts can guard the same resource.
// Your body may write that hash too (not the two reserved fields), or keep
// its data in keys of its own.
//
// If the rule rejects token (older than the fence record, or equal to it
// from another holder), nothing is written, the body does not run, and the
// error wraps a *[fencing.StaleError] (and so [fencing.ErrStale]) with the
// accepted token and holder id, as FencedSet's does. An accepted token is
// recorded before the body runs: Redis does not roll back a script that
// fails part way, so if the body fails (an error reply or a Lua error),
// the fence record stays advanced with whatever the body wrote before it
// failed, and the error is returned. A zero token wraps
// [fencing.ErrInvalidToken]; an empty key or holder, or a key inside the
// backend's KeyPrefix, [driver.ErrInvalid]; nothing is sent then. A
// key that is not a hash, or a fence record fencedlock did not write,
// returns an error wrapping [ErrCorrupt] and runs nothing.
//
// On Redis Cluster every key must hash to the same slot as key: give them
// one hash tag ("{order:42}" and "{order:42}:items"); keys in another slot
// return an error wrapping [driver.ErrInvalid] and nothing is sent.
func (s *FencedScript) Exec(ctx context.Context, key string, token fencing.Token, holder string, keys, args []string) (rueidis.RedisMessage, error) {
	const op = "fenced eval"
	b := s.b
	if b.closed.Load() {
		return rueidis.RedisMessage{}, errClosed(op, key)
	}
	if err := redisscript.CheckResourceKey(op, key, b.opts.KeyPrefix); err != nil {
		return rueidis.RedisMessage{}, err
	}
	cluster := len(keys) > 0 && b.c.Mode() == rueidis.ClientModeCluster
	for _, k := range keys {
		if err := redisscript.CheckResourceKey(op, k, b.opts.KeyPrefix); err != nil {
			return rueidis.RedisMessage{}, err
		}
		if cluster && rediscore.HashSlot(k) != rediscore.HashSlot(key) {
			// rueidis would panic building a command across slots.
			return rueidis.RedisMessage{}, fmt.Errorf("redis: %s %q: key %q in another Cluster slot (give the keys one hash tag): %w", op, key, k, driver.ErrInvalid)
		}
	}
	if err := redisscript.CheckGuardArgs(op, key, token, holder); err != nil {
		return rueidis.RedisMessage{}, err
	}
	allKeys := make([]string, 0, 1+len(keys))
	allKeys = append(allKeys, key)
	allKeys = append(allKeys, keys...)
	msg, err := s.script.Exec(ctx, b.c, allKeys, redisscript.FencedWriteArgs(token, holder, args)).ToMessage()
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			if rest, found := strings.CutPrefix(re.Error(), staleCode+" "); found {
				fs, from, _ := strings.Cut(rest, " ")
				return rueidis.RedisMessage{}, redisscript.Stale(op, key, token, holder, fs, from)
			}
		}
		return rueidis.RedisMessage{}, wrap(op, key, err)
	}
	return msg, nil
}
