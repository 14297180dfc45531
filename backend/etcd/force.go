package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

var _ driver.ForceReleaser = (*Backend)(nil)

// ForceRelease deletes key's whole queue (the holder's entry and every
// waiter's) in one Txn, whoever holds it: an operator's forced release
// (see [driver.ForceReleaser]). The Txn reads the holder first, so the
// result names the lease it broke. ForceResult.Before is the holder's
// fence (its entry's create revision; 0 if the key was free) and After
// the store's revision after the Txn: every entry created later, and so
// every later fence, is greater. Waiters find their entry gone and start
// over at the end of the queue (see [Backend.AcquireWait]). The holder's
// etcd lease is left to expire; a holder using a Backend learns of the
// deletion from its deletion watch, or, if that watch is stalled, from
// the proof of its next renewal (within two renew intervals plus round
// trips: see "Renewal and loss" in the package doc), and reports the
// lease lost.
//
// Write After to the resources the lock guards with [Backend.FenceBarrier]
// so that the old holder's next [FencedStore.Set] is rejected.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.ForceResult, error) {
	var r driver.ForceResult
	ctx, cancel, err := b.enterKey(ctx, "force release", key)
	if err != nil {
		return r, err
	}
	defer b.leave(ctx, cancel)
	dir := b.lockDir(key)
	resp, err := b.c.Txn(ctx).Then(
		clientv3.OpGet(dir, clientv3.WithFirstCreate()...),
		clientv3.OpDelete(dir, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return r, b.ctxErr(ctx, errorf("force release %q: %w", key, err))
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		r.Held = true
		r.Holder = string(kvs[0].Value)
		r.Before = fencing.Token(kvs[0].CreateRevision)
	}
	r.After = fencing.Token(resp.Header.Revision)
	if r.After <= r.Before {
		return r, errorf("force release %q: revision %d not above the holder's %d", key, r.After, r.Before)
	}
	return r, nil
}

// FenceBarrier raises the fence record of key, a resource guarded by
// [FencedStore.Set], to token from holder without writing key itself, if
// the fencing rule accepts it (one Txn, the check of FencedStore.Set). After it,
// a FencedStore.Set with a smaller token, or the same token from another holder,
// is rejected. An operator writes ForceResult.After from
// [Backend.ForceRelease] this way. A rejection returns an error wrapping a
// *[fencing.StaleError].
func (b *Backend) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	return b.guardedWrite(ctx, "fence barrier", key, nil, token, holder)
}
