package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// FencedStore is the resource-side guard for data kept in etcd, behind
// [fencing.Store]: ordinary etcd keys of yours (outside the backend's
// KeyPrefix), each written only if the fencing rule ([fencing.Check])
// accepts the token from the holder: greater than the highest accepted for
// the key, or equal to it and from the same holder. The check, the write of
// the value and the write of the new fence record (at
// KeyPrefix+"fences/"+escaped key) are one Txn, so no other write can come
// between them. Pass the lease's fence and holder id: lease.Fence(),
// lease.Holder().
//
// A rejected write returns an error wrapping a *[fencing.StaleError] and
// writes nothing; a zero token returns an error wrapping
// [fencing.ErrInvalidToken]; an empty holder id, or a key empty or inside
// KeyPrefix, one wrapping [driver.ErrInvalid]. It uses its Backend's client
// and ends with [driver.ErrClosed] once the Backend is closed. It is safe
// for concurrent use.
type FencedStore struct{ b *Backend }

var _ fencing.Store = (*FencedStore)(nil)

// NewFencedStore returns the fenced store on b's cluster, its fence records
// under b's KeyPrefix.
func NewFencedStore(b *Backend) *FencedStore { return &FencedStore{b: b} }

// Get implements [fencing.Store]: key and its fence record in one Txn.
func (s *FencedStore) Get(ctx context.Context, key string) (fencing.Record, error) {
	ctx, cancel, err := s.b.enter(ctx)
	if err != nil {
		return fencing.Record{}, err
	}
	defer s.b.leave(ctx, cancel)
	snap, err := s.b.readFenced(ctx, "fenced get", key)
	return snap.rec, err
}

// Set implements [fencing.Store]: one Txn.
func (s *FencedStore) Set(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return s.b.guardedWrite(ctx, "fenced put", key, &value, token, holder)
}

// Update implements [fencing.Store]: it reads key and its fence record in
// one Txn, applies the rule to the record read, calls fn, and writes fn's
// value with the new fence record in a second Txn that compares the mod
// revisions of both keys with those read, so the rule checked on the read
// still holds at the write. When the compare fails (a write came between),
// it starts over; it ends only on success, an error, or ctx.
func (s *FencedStore) Update(ctx context.Context, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	const op = "fenced update"
	return s.b.inWrite(ctx, op, key, token, holder, func(ctx context.Context) error {
		return s.b.update(ctx, op, key, token, holder, fn)
	})
}

// update is the loop of Update; ctx comes from enter.
func (b *Backend) update(ctx context.Context, op, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	fk := b.fenceKey(key)
	for {
		cur, err := b.readFenced(ctx, op, key)
		if err != nil {
			return err
		}
		if err := fencing.Check(cur.rec.Fence, cur.rec.Holder, token, holder); err != nil {
			return fmt.Errorf("etcd: %s %q: %w", op, key, err)
		}
		value, err := fn(cur.rec)
		if err != nil {
			return err
		}
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.keyRev),
				clientv3.Compare(clientv3.ModRevision(fk), "=", cur.fenceRev)).
			Then(clientv3.OpPut(key, value), clientv3.OpPut(fk, fenceRecord(token, holder))).
			Commit()
		if err != nil {
			return b.ctxErr(ctx, fmt.Errorf("etcd: %s %q: %w", op, key, err))
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// fencedSnap is a key's record as one Txn read it, with the mod revisions
// of the key and of its fence record (0 for an absent key).
type fencedSnap struct {
	rec              fencing.Record
	keyRev, fenceRev int64
}

// readFenced reads key and its fence record in one Txn; ctx comes from
// enter.
func (b *Backend) readFenced(ctx context.Context, op, key string) (fencedSnap, error) {
	var s fencedSnap
	if key == "" {
		return s, fmt.Errorf("etcd: %s: empty key: %w", op, driver.ErrInvalid)
	}
	resp, err := b.c.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(b.fenceKey(key))).Commit()
	if err != nil {
		return s, b.ctxErr(ctx, fmt.Errorf("etcd: %s %q: %w", op, key, err))
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		s.rec.Value, s.rec.Found, s.keyRev = string(kvs[0].Value), true, kvs[0].ModRevision
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		s.rec.Fence, s.rec.Holder, err = parseFenceRecord(kvs[0].Value)
		if err != nil {
			return fencedSnap{}, fmt.Errorf("etcd: %s %q: %w", op, key, err)
		}
		s.fenceRev = kvs[0].ModRevision
	}
	return s, nil
}
