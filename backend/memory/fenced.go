package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// FencedStore is an in-memory [fencing.Store]: the guarded writes of the
// Redis and etcd backends with no server, for the unit tests of code that
// writes under a fence. It applies [fencing.Check] to every write, as the
// real stores do, so a test sees the late write of a former holder
// rejected. Its zero value is not usable; call [NewFencedStore]. It is safe
// for concurrent use and lives only as long as the process.
type FencedStore struct {
	mu   sync.Mutex
	keys map[string]fencedKey
}

// fencedKey is a key's record and the count of writes to it, which tells
// Update whether a write came between its read and its write.
type fencedKey struct {
	rec    fencing.Record
	writes uint64
}

var _ fencing.Store = (*FencedStore)(nil)

// NewFencedStore returns an empty FencedStore.
func NewFencedStore() *FencedStore { return &FencedStore{keys: make(map[string]fencedKey)} }

// Get implements [fencing.Store].
func (s *FencedStore) Get(ctx context.Context, key string) (fencing.Record, error) {
	k, err := s.read(ctx, "get", key)
	return k.rec, err
}

// Set implements [fencing.Store]. An empty key or holder id returns an
// error wrapping [driver.ErrInvalid], as on etcd.
func (s *FencedStore) Set(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return s.Update(ctx, key, token, holder, func(fencing.Record) (string, error) { return value, nil })
}

// Update implements [fencing.Store]: fn runs without the store's lock
// held, so it may use the store itself.
func (s *FencedStore) Update(ctx context.Context, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	if token != 0 && holder == "" {
		return fmt.Errorf("memory: fenced update %q: empty holder id: %w", key, driver.ErrInvalid)
	}
	for {
		cur, err := s.read(ctx, "update", key)
		if err != nil {
			return err
		}
		if err := fencing.Check(cur.rec.Fence, cur.rec.Holder, token, holder); err != nil {
			return fmt.Errorf("memory: fenced update %q: %w", key, err)
		}
		value, err := fn(cur.rec)
		if err != nil {
			return err
		}
		if s.writeIfUnchanged(key, cur.writes, fencing.Record{Value: value, Found: true, Fence: token, Holder: holder}) {
			return nil
		}
	}
}

// read returns key's state, after checking the context and the key.
func (s *FencedStore) read(ctx context.Context, op, key string) (fencedKey, error) {
	if key == "" {
		return fencedKey{}, fmt.Errorf("memory: fenced %s: empty key: %w", op, driver.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fencedKey{}, fmt.Errorf("memory: fenced %s %q: %w", op, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key], nil
}

// writeIfUnchanged stores rec at key if key had been written exactly writes
// times, and reports whether it did.
func (s *FencedStore) writeIfUnchanged(key string, writes uint64, rec fencing.Record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key].writes != writes {
		return false
	}
	s.keys[key] = fencedKey{rec: rec, writes: writes + 1}
	return true
}
