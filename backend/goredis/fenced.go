package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencedlock/fencedlock"
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
	return b.fencedWrite(ctx, "fenced set", key, token, holder, []string{ValueField, value})
}

// FencedHSet sets fields of key, a Redis hash of yours, only if the fencing
// rule accepts token from holder, exactly as [Backend.FencedSet] does.
// fields must hold at least one field and must not name [FenceField] or
// [HolderField]; other fields of the hash are left as they are.
func (b *Backend) FencedHSet(ctx context.Context, key string, fields map[string]string, token fencing.Token, holder string) error {
	if len(fields) == 0 {
		return fmt.Errorf("redis: fenced hset %q: no fields: %w", key, fencedlock.ErrInvalid)
	}
	pairs := make([]string, 0, 2*len(fields))
	for f, v := range fields {
		pairs = append(pairs, f, v)
	}
	return b.fencedWrite(ctx, "fenced hset", key, token, holder, pairs)
}

func (b *Backend) fencedWrite(ctx context.Context, op, key string, token fencing.Token, holder string, pairs []string) error {
	if b.closed.Load() {
		return errClosed(op, key)
	}
	if err := b.checkResourceKey(op, key); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("redis: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("redis: %s %q: empty holder id: %w", op, key, fencedlock.ErrInvalid)
	}
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i] == FenceField || pairs[i] == HolderField {
			return fmt.Errorf("redis: %s %q: field %q is reserved for the fence record: %w", op, key, pairs[i], fencedlock.ErrInvalid)
		}
	}
	cmd := make([]any, 0, 6+len(pairs))
	cmd = append(cmd, nil, nil, 1, key, token.String(), holder)
	for _, p := range pairs {
		cmd = append(cmd, p)
	}
	vals, err := b.run(ctx, fencedWriteScript, cmd).Slice()
	if err != nil {
		return wrap(op, key, err)
	}
	if len(vals) == 0 {
		return fmt.Errorf("redis: %s %q: empty reply", op, key)
	}
	ok, isInt := vals[0].(int64)
	if !isInt {
		return fmt.Errorf("redis: %s %q: unexpected reply %T", op, key, vals[0])
	}
	if ok == 1 {
		return nil
	}
	if len(vals) != 3 {
		return fmt.Errorf("redis: %s %q: unexpected reply of %d values", op, key, len(vals))
	}
	fs, ok1 := replyString(vals[1])
	from, ok2 := replyString(vals[2])
	accepted, perr := fencing.ParseToken(fs)
	if !ok1 || !ok2 || perr != nil {
		return fmt.Errorf("redis: %s %q: unreadable fence record in reply: %w", op, key, ErrCorrupt)
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, &fencing.StaleError{
		Token: token, Holder: holder, Accepted: accepted, AcceptedFrom: from,
	})
}

// checkResourceKey refuses keys the guard must not write: empty ones and
// those inside KeyPrefix, where the backend keeps its locks.
func (b *Backend) checkResourceKey(op, key string) error {
	if key == "" {
		return fmt.Errorf("redis: %s: empty key: %w", op, fencedlock.ErrInvalid)
	}
	if strings.HasPrefix(key, b.opts.KeyPrefix) {
		return fmt.Errorf("redis: %s %q: key inside the backend's KeyPrefix %q: %w", op, key, b.opts.KeyPrefix, fencedlock.ErrInvalid)
	}
	return nil
}

// FencedGet reads a hash written by [Backend.FencedSet] in one round trip:
// the value (Found false if the hash has no [ValueField]) and the highest
// token accepted for key with its holder id (0 and "" if none yet).
func (b *Backend) FencedGet(ctx context.Context, key string) (fencing.Record, error) {
	if b.closed.Load() {
		return fencing.Record{}, errClosed("fenced get", key)
	}
	if key == "" {
		return fencing.Record{}, fmt.Errorf("redis: fenced get: empty key: %w", fencedlock.ErrInvalid)
	}
	vals, err := b.c.HMGet(ctx, key, ValueField, FenceField, HolderField).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fencing.Record{}, wrap("fenced get", key, err)
	}
	if len(vals) != 3 {
		return fencing.Record{}, fmt.Errorf("redis: fenced get %q: unexpected reply of %d values", key, len(vals))
	}
	var r fencing.Record
	if v, ok := replyString(vals[0]); ok {
		r.Value, r.Found = v, true
	}
	if fs, ok := replyString(vals[1]); ok {
		t, perr := fencing.ParseToken(fs)
		if perr != nil || t == 0 || t.String() != fs { // the script's form: no sign, no leading zero
			return fencing.Record{}, fmt.Errorf("redis: fenced get %q: fence record %q: %w", key, fs, ErrCorrupt)
		}
		r.Fence = t
		r.Holder, _ = replyString(vals[2])
	}
	return r, nil
}
