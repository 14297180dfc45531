package redis

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencing"
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
// wrapping [fencedlock.ErrInvalid]; nothing is sent. A key that is not a
// hash, or a fence record fencedlock did not write, returns an error
// wrapping [ErrCorrupt] and changes nothing.
//
// The guard needs one key, so it works on Redis Cluster for any key. Pass
// the lease's fence and holder id: lease.Fence(), lease.Holder(). The fence
// record is never deleted by this package; delete the hash yourself when
// the resource is gone (a later write then starts a new record).
func (b *Backend) FencedSet(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return b.fencedWrite(ctx, "fenced set", key, token, holder, []string{ValueField, value})
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
	args := make([]string, 0, 2+len(pairs))
	args = append(args, token.String(), holder)
	args = append(args, pairs...)
	vals, err := fencedWriteScript.Exec(ctx, b.c, []string{key}, args).ToArray()
	if err != nil {
		return wrap(op, key, err)
	}
	if len(vals) == 0 {
		return fmt.Errorf("redis: %s %q: empty reply", op, key)
	}
	ok, err := vals[0].AsInt64()
	if err != nil {
		return fmt.Errorf("redis: %s %q: unexpected reply: %w", op, key, err)
	}
	if ok == 1 {
		return nil
	}
	if len(vals) != 3 {
		return fmt.Errorf("redis: %s %q: unexpected reply of %d values", op, key, len(vals))
	}
	fs, err1 := vals[1].ToString()
	from, err2 := vals[2].ToString()
	accepted, perr := fencing.ParseToken(fs)
	if err1 != nil || err2 != nil || perr != nil {
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
// the value (ok false if the hash has no [ValueField]) and the highest
// token accepted for key with its holder id (0 and "" if none yet).
func (b *Backend) FencedGet(ctx context.Context, key string) (value string, ok bool, token fencing.Token, holder string, err error) {
	if b.closed.Load() {
		return "", false, 0, "", errClosed("fenced get", key)
	}
	if key == "" {
		return "", false, 0, "", fmt.Errorf("redis: fenced get: empty key: %w", fencedlock.ErrInvalid)
	}
	vals, err := b.c.Do(ctx, b.c.B().Hmget().Key(key).Field(ValueField, FenceField, HolderField).Build()).ToArray()
	if err != nil {
		return "", false, 0, "", wrap("fenced get", key, err)
	}
	if len(vals) != 3 {
		return "", false, 0, "", fmt.Errorf("redis: fenced get %q: unexpected reply of %d values", key, len(vals))
	}
	if v, verr := vals[0].ToString(); verr == nil {
		value, ok = v, true
	} else if !rueidis.IsRedisNil(verr) {
		return "", false, 0, "", wrap("fenced get", key, verr)
	}
	if fs, ferr := vals[1].ToString(); ferr == nil {
		t, perr := fencing.ParseToken(fs)
		if perr != nil || t == 0 || t.String() != fs { // the script's form: no sign, no leading zero
			return "", false, 0, "", fmt.Errorf("redis: fenced get %q: fence record %q: %w", key, fs, ErrCorrupt)
		}
		token = t
		holder, _ = vals[2].ToString()
	} else if !rueidis.IsRedisNil(ferr) {
		return "", false, 0, "", wrap("fenced get", key, ferr)
	}
	return value, ok, token, holder, nil
}
