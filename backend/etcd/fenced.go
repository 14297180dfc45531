package etcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// fenceDigits is the width of a stored fence: zero-padded decimal, so that
// etcd's byte-wise value comparison orders fences numerically.
const fenceDigits = 20

func fenceRecord(token fencing.Token, holder string) string {
	return fmt.Sprintf("%0*d %s", fenceDigits, uint64(token), holder)
}

func parseFenceRecord(v []byte) (fencing.Token, string, error) {
	s := string(v)
	if len(s) < fenceDigits+1 || s[fenceDigits] != ' ' {
		return 0, "", fmt.Errorf("etcd: malformed fence record %q", s)
	}
	t, err := fencing.ParseToken(s[:fenceDigits])
	if err != nil {
		return 0, "", fmt.Errorf("etcd: malformed fence record: %w", err)
	}
	return t, s[fenceDigits+1:], nil
}

// FencedPut writes value at key (an ordinary etcd key of yours; it must lie
// outside the backend's KeyPrefix) only if the fencing rule accepts token from holder
// ([fencing.Check]): token greater than the highest accepted for key, or
// equal to it and from the same holder. The check, the write of value and
// the write of the new fence record (at KeyPrefix+"fences/"+escaped key) are
// one Txn, so no other write can come between them. A rejected write
// returns a *[fencing.StaleError] (wrapping [fencing.ErrStale]) and writes
// nothing; a zero token returns an error wrapping [fencing.ErrInvalidToken]
// and an empty holder id one wrapping [driver.ErrInvalid].
// Pass the lease's fence and holder id: lease.Fence(), lease.Holder().
func (b *Backend) FencedPut(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return b.guardedWrite(ctx, "fenced put", key, &value, token, holder)
}

// guardedWrite is FencedPut (value not nil: key is written with its fence
// record) and FenceBarrier (value nil: only the record), op naming it in
// errors: one Txn that applies the guard rule to the fence record of key.
func (b *Backend) guardedWrite(ctx context.Context, op, key string, value *string, token fencing.Token, holder string) error {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	if key == "" || strings.HasPrefix(key, b.opts.KeyPrefix) {
		return fmt.Errorf("etcd: %s %q: key empty or inside the backend's KeyPrefix %q: %w", op, key, b.opts.KeyPrefix, driver.ErrInvalid)
	}
	if token == 0 {
		return fmt.Errorf("etcd: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("etcd: %s %q: empty holder id: %w", op, key, driver.ErrInvalid)
	}
	fk := b.fenceKey(key)
	rec := fenceRecord(token, holder)
	puts := []clientv3.Op{clientv3.OpPut(fk, rec)}
	if value != nil {
		puts = []clientv3.Op{clientv3.OpPut(key, *value), puts[0]}
	}
	// Accept when: no record yet; or stored fence < token (any stored
	// "<fence> <holder>" whose fence is smaller sorts below the bare padded
	// token); or stored record == ours (equal fence, same holder).
	sameHolder := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(fk), "=", rec)},
		puts,
		[]clientv3.Op{clientv3.OpGet(fk)})
	greater := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(fk), "<", rec[:fenceDigits])},
		puts,
		[]clientv3.Op{sameHolder})
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(fk), "=", 0)).
		Then(puts...).
		Else(greater).
		Commit()
	if err != nil {
		return b.ctxErr(ctx, fmt.Errorf("etcd: %s %q: %w", op, key, err))
	}
	if resp.Succeeded {
		return nil
	}
	r2 := resp.Responses[0].GetResponseTxn()
	if r2.GetSucceeded() {
		return nil
	}
	r3 := r2.GetResponses()[0].GetResponseTxn()
	if r3.GetSucceeded() {
		return nil
	}
	stale := &fencing.StaleError{Token: token, Holder: holder}
	if kvs := r3.GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		acc, from, perr := parseFenceRecord(kvs[0].Value)
		if perr != nil {
			return fmt.Errorf("etcd: %s %q: %w", op, key, perr)
		}
		stale.Accepted, stale.AcceptedFrom = acc, from
	}
	return fmt.Errorf("etcd: %s %q: %w", op, key, stale)
}

// FencedGet reads key and its fence record in one consistent read: the
// value (Found false if key is absent) and the highest fence accepted by
// [Backend.FencedPut] for key with its holder id (0 and "" if none).
func (b *Backend) FencedGet(ctx context.Context, key string) (fencing.Record, error) {
	var r fencing.Record
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return r, err
	}
	defer b.leave(ctx, cancel)
	if key == "" {
		return r, fmt.Errorf("etcd: fenced get: empty key: %w", driver.ErrInvalid)
	}
	resp, err := b.c.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(b.fenceKey(key))).Commit()
	if err != nil {
		return r, b.ctxErr(ctx, fmt.Errorf("etcd: fenced get %q: %w", key, err))
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		r.Value, r.Found = string(kvs[0].Value), true
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		r.Fence, r.Holder, err = parseFenceRecord(kvs[0].Value)
		if err != nil {
			return fencing.Record{}, fmt.Errorf("etcd: fenced get %q: %w", key, err)
		}
	}
	return r, nil
}
