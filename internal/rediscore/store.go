package rediscore

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Store is the fenced store of a Redis backend: a [fencing.Store] on Redis
// hashes of the user's. A key is a hash holding the value in field
// redisscript.ValueField and the fence record in FenceField and
// HolderField; every write runs one script that applies the fencing rule
// and writes in the same step, on one key (one Cluster slot). Keys inside
// the backend's KeyPrefix are refused. It is safe for concurrent use.
type Store struct {
	c      Conn
	prefix string // the backend's KeyPrefix, where no guarded key may live
}

var _ fencing.Store = (*Store)(nil)

// NewStore returns the fenced store of the backend behind c, whose
// KeyPrefix is prefix.
func NewStore(c Conn, prefix string) *Store { return &Store{c: c, prefix: prefix} }

// Get reads key's value and fence record in one round trip (HMGET): Found
// false if the hash has no value, Fence 0 and Holder "" if no token was
// accepted yet. A key that is not a hash returns the server's WRONGTYPE
// error; a fence record fencedlock did not write, redisscript.ErrCorrupt.
func (s *Store) Get(ctx context.Context, key string) (fencing.Record, error) {
	const op = "fenced get"
	if s.c.Closed() {
		return fencing.Record{}, redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckGetKey(key); err != nil {
		return fencing.Record{}, err
	}
	vals, err := s.c.HMGet(ctx, key, redisscript.GetFields)
	if err != nil {
		return fencing.Record{}, s.c.Wrap(op, key, err)
	}
	return redisscript.ReadFencedGet(key, vals, func(err error) error { return s.c.Wrap(op, key, err) })
}

// Set writes value at key if the fencing rule accepts token from holder,
// the check and the write in one script (fenced_write.lua). A rejected
// write returns an error wrapping a *[fencing.StaleError] and writes
// nothing; a zero token, [fencing.ErrInvalidToken], and nothing is sent.
func (s *Store) Set(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return s.write(ctx, "fenced set", key, token, holder, redisscript.ValuePairs(value))
}

// HSet sets fields of the hash key if the fencing rule accepts token from
// holder, as Set does; the other fields of the hash are left as they are.
// fields must hold at least one field and must not name the fence
// record's fields.
func (s *Store) HSet(ctx context.Context, key string, fields map[string]string, token fencing.Token, holder string) error {
	pairs, err := redisscript.HSetPairs(key, fields)
	if err != nil {
		return err
	}
	return s.write(ctx, "fenced hset", key, token, holder, pairs)
}

// write runs fenced_write.lua (op) of pairs to key.
func (s *Store) write(ctx context.Context, op, key string, token fencing.Token, holder string, pairs []string) error {
	if s.c.Closed() {
		return redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckFencedWrite(op, key, s.prefix, token, holder, pairs); err != nil {
		return err
	}
	vals, err := s.c.Eval(ctx, fencedWriteScript, []string{key}, redisscript.FencedWriteArgs(token, holder, pairs))
	if err != nil {
		return s.c.Wrap(op, key, err)
	}
	return redisscript.ReadFencedWrite(op, key, token, holder, vals)
}

// errChanged is the reply {2} of fenced_update.lua: another write came
// between the read and the write.
var errChanged = errors.New("rediscore: value changed since it was read")

// Update is the read-modify-write of [fencing.Store]: it reads key (Get),
// refuses a token the fence record already rejects without calling fn,
// calls fn with the record read, and writes fn's result with
// fenced_update.lua, which applies the fencing rule and writes only if the
// value read (or its absence) is still there. When another write came in
// between, it reads again and calls fn again, until ctx is done. An error
// of fn is returned as it came, and nothing is written.
func (s *Store) Update(ctx context.Context, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	const op = "fenced update"
	if s.c.Closed() {
		return redisscript.ErrClosed(op, key)
	}
	if err := redisscript.CheckFencedWrite(op, key, s.prefix, token, holder, nil); err != nil {
		return err
	}
	for {
		err := s.updateOnce(ctx, op, key, token, holder, fn)
		if !errors.Is(err, errChanged) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis: %s %q: %w", op, key, ctx.Err())
		}
	}
}

// updateOnce is one read, call of fn and compare-and-write of Update; it
// returns errChanged when the value read was no longer there.
func (s *Store) updateOnce(ctx context.Context, op, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	cur, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	if cur.Fence != 0 && fencing.Check(cur.Fence, cur.Holder, token, holder) != nil {
		return redisscript.Stale(op, key, token, holder, cur.Fence.String(), cur.Holder)
	}
	value, err := fn(cur)
	if err != nil {
		return err
	}
	had := "0"
	if cur.Found {
		had = "1"
	}
	vals, err := s.c.Eval(ctx, fencedUpdateScript, []string{key}, []string{token.String(), holder, had, cur.Value, value})
	if err != nil {
		return s.c.Wrap(op, key, err)
	}
	if len(vals) == 1 {
		if n, err := vals[0].Int(); err == nil && n == 2 {
			return errChanged
		}
	}
	return redisscript.ReadFencedWrite(op, key, token, holder, vals)
}
