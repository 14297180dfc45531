package goredis

import (
	"context"
	"errors"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// Fields of a guarded hash, the same as backend/redis's (see
// [Backend.FencedSet]).
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
// The check and the write are one step (fenced_write.lua, the script of
// backend/redis), so no other write can come between them. The hash holds
// the value in field [ValueField] and the fence record in [FenceField] and
// [HolderField]; read it back with [Backend.FencedGet].
//
// A rejected write returns an error wrapping a *[fencing.StaleError] (and
// so [fencing.ErrStale]) and writes nothing. A zero token returns an error
// wrapping [fencing.ErrInvalidToken]; an empty key or holder, or a key
// inside the backend's KeyPrefix, an error wrapping
// [fencedlock.ErrInvalid]; nothing is sent. A key that is not a hash, or a
// fence record fencedlock did not write, returns an error wrapping
// [ErrCorrupt] and changes nothing. The guard needs one key, so it works on
// Redis Cluster for any key.
func (b *Backend) FencedSet(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return b.fencedWrite(ctx, "fenced set", key, token, holder, redisscript.ValuePairs(value))
}

// FencedHSet sets fields of key, a Redis hash of yours, only if the fencing
// rule accepts token from holder, exactly as [Backend.FencedSet] does.
// fields must hold at least one field and must not name [FenceField] or
// [HolderField]; other fields of the hash are left as they are.
func (b *Backend) FencedHSet(ctx context.Context, key string, fields map[string]string, token fencing.Token, holder string) error {
	pairs, err := redisscript.HSetPairs(key, fields)
	if err != nil {
		return err
	}
	return b.fencedWrite(ctx, "fenced hset", key, token, holder, pairs)
}

func (b *Backend) fencedWrite(ctx context.Context, op, key string, token fencing.Token, holder string, pairs []string) error {
	if b.closed.Load() {
		return errClosed(op, key)
	}
	if err := redisscript.CheckFencedWrite(op, key, b.opts.KeyPrefix, token, holder, pairs); err != nil {
		return err
	}
	args := redisscript.FencedWriteArgs(token, holder, pairs)
	cmd := make([]any, 0, 4+len(args))
	cmd = append(cmd, nil, nil, 1, key)
	for _, a := range args {
		cmd = append(cmd, a)
	}
	vals, err := b.run(ctx, fencedWriteScript, cmd).Slice()
	if err != nil {
		return wrap(op, key, err)
	}
	return redisscript.ReadFencedWrite(op, key, token, holder, values(vals))
}

// FencedGet reads a hash written by [Backend.FencedSet] in one round trip:
// the value (Found false if the hash has no [ValueField]) and the highest
// token accepted for key with its holder id (0 and "" if none yet).
func (b *Backend) FencedGet(ctx context.Context, key string) (fencing.Record, error) {
	if b.closed.Load() {
		return fencing.Record{}, errClosed("fenced get", key)
	}
	if err := redisscript.CheckGetKey(key); err != nil {
		return fencing.Record{}, err
	}
	vals, err := b.c.HMGet(ctx, key, redisscript.GetFields...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fencing.Record{}, wrap("fenced get", key, err)
	}
	return redisscript.ReadFencedGet(key, values(vals), func(err error) error { return wrap("fenced get", key, err) })
}
