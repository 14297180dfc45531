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

// FencedPut is [FencedStore.Set] on b, kept for existing callers; code
// that may swap backends uses NewFencedStore(b), the same write behind
// [fencing.Store].
func (b *Backend) FencedPut(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return NewFencedStore(b).Set(ctx, key, value, token, holder)
}

// FencedGet is [FencedStore.Get] on b, kept for existing callers; code
// that may swap backends uses NewFencedStore(b), the same read behind
// [fencing.Store].
func (b *Backend) FencedGet(ctx context.Context, key string) (fencing.Record, error) {
	return NewFencedStore(b).Get(ctx, key)
}

// checkWrite refuses a guarded write of key that must not reach the
// server: key empty or inside KeyPrefix, zero token, empty holder id.
func (b *Backend) checkWrite(op, key string, token fencing.Token, holder string) error {
	if key == "" || strings.HasPrefix(key, b.opts.KeyPrefix) {
		return fmt.Errorf("etcd: %s %q: key empty or inside the backend's KeyPrefix %q: %w", op, key, b.opts.KeyPrefix, driver.ErrInvalid)
	}
	if token == 0 {
		return fmt.Errorf("etcd: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("etcd: %s %q: empty holder id: %w", op, key, driver.ErrInvalid)
	}
	return nil
}

// guardedWrite is FencedStore.Set (value not nil: key is written with its fence
// record) and FenceBarrier (value nil: only the record), op naming it in
// errors: one Txn that applies the guard rule to the fence record of key.
func (b *Backend) guardedWrite(ctx context.Context, op, key string, value *string, token fencing.Token, holder string) error {
	return b.inWrite(ctx, op, key, token, holder, func(ctx context.Context) error {
		return b.putIfAccepted(ctx, op, key, value, token, holder)
	})
}

// inWrite runs write inside enter and leave, once checkWrite has accepted
// key, token and holder: the frame of every guarded write.
func (b *Backend) inWrite(ctx context.Context, op, key string, token fencing.Token, holder string, write func(ctx context.Context) error) error {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	if err := b.checkWrite(op, key, token, holder); err != nil {
		return err
	}
	return write(ctx)
}

// putIfAccepted is the Txn of guardedWrite; ctx comes from enter.
func (b *Backend) putIfAccepted(ctx context.Context, op, key string, value *string, token fencing.Token, holder string) error {
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
