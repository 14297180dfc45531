package goredis

import (
	"context"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
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

// FencedSet is [Store.Set] of [NewStore](b), the code backend/redis runs
// too: it writes value to key, a Redis hash of yours, in field
// [ValueField] only if the fencing rule ([fencing.Check]) accepts token
// from holder, the check and the write in one script. A rejected write
// returns an error wrapping a *[fencing.StaleError] and writes nothing; a
// zero token, [fencing.ErrInvalidToken]. backend/redis's FencedSet
// documents every case.
func (b *Backend) FencedSet(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return b.store.Set(ctx, key, value, token, holder)
}

// FencedHSet is [Store.HSet] of [NewStore](b): FencedSet of several
// fields (at least one, not [FenceField] nor [HolderField]); the other
// fields of the hash are left as they are.
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
