package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Sets of keys (package multilock): one lease of its own for the set (not
// a pooled one), and one Txn that puts an entry for every key on it only
// if every key's queue is empty. Each key's entry is the lock of Acquire,
// so a set and a single-key lease exclude each other. The fence of every
// key is the Txn's revision: its entries' create revision, above every
// earlier grant on each key (revisions increase store-wide). Releasing
// the set revokes its lease, which deletes every entry on it at once.
var _ driver.MultiLocker = (*Backend)(nil)

// multiGrant is a MultiGrant's Data: the set's lease, its entries and
// their create revision.
type multiGrant struct {
	lease clientv3.LeaseID
	names []string
	rev   int64
}

// AcquireMulti takes every key of req.Keys on one new lease in one Txn,
// or none: a *driver.HeldError names the first key held (or waited for).
func (b *Backend) AcquireMulti(ctx context.Context, req driver.MultiRequest) (driver.MultiGrant, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return driver.MultiGrant{}, err
	}
	defer b.leave(ctx, cancel)
	lg, err := b.c.Grant(ctx, ttlSeconds(req.TTL))
	if err != nil {
		return driver.MultiGrant{}, b.ctxErr(ctx, errorf("acquire set %q: lease grant: %w", req.Keys, err))
	}
	d := &multiGrant{lease: lg.ID, names: make([]string, len(req.Keys))}
	conds := make([]clientv3.Cmp, len(req.Keys))
	puts := make([]clientv3.Op, len(req.Keys))
	gets := make([]clientv3.Op, len(req.Keys))
	for i, k := range req.Keys {
		dir := b.lockDir(k)
		d.names[i] = entryIn(dir, lg.ID)
		conds[i] = clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()
		puts[i] = clientv3.OpPut(d.names[i], driver.HolderID(req.Owner), clientv3.WithLease(lg.ID))
		gets[i] = clientv3.OpGet(dir, firstCreate...)
	}
	resp, err := b.c.Txn(ctx).If(conds...).Then(puts...).Else(gets...).Commit()
	if err != nil || !resp.Succeeded {
		// Applied or not, revoking our own lease removes whatever the Txn
		// created on it, and nothing else.
		b.revoke(lg.ID)
	}
	if err != nil {
		return driver.MultiGrant{}, b.ctxErr(ctx, errorf("acquire set %q: %w", req.Keys, err))
	}
	if !resp.Succeeded {
		return driver.MultiGrant{}, b.heldIn(ctx, req.Keys, resp)
	}
	d.rev = resp.Header.Revision
	fences := make([]fencing.Token, len(req.Keys))
	for i := range fences {
		fences[i] = fencing.Token(d.rev)
	}
	return driver.MultiGrant{Keys: req.Keys, Owner: req.Owner, Fences: fences, TTL: time.Duration(lg.TTL) * time.Second, Data: d}, nil
}

// heldIn returns the HeldError of the first key of a refused set's Txn
// whose queue has an entry, with its holder's remaining lease.
func (b *Backend) heldIn(ctx context.Context, keys []string, resp *clientv3.TxnResponse) error {
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue
		}
		held := &driver.HeldError{Key: keys[i]}
		if kvs[0].Lease != 0 {
			if tr, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease)); err == nil {
				held.RetryAfter = remaining(tr)
			}
		}
		return fmt.Errorf("etcd: acquire set: %w", held)
	}
	return fmt.Errorf("etcd: acquire set %q: refused, but no key is held: %w", keys, driver.ErrNotAcquired)
}

// multiOf returns g's Data, or, for a MultiGrant of Keys and Owner only
// (the Locker's clean-up), the owner's entries found by holder id (nil
// if it has none).
func (b *Backend) multiOf(ctx context.Context, g driver.MultiGrant) (*multiGrant, error) {
	if d, ok := g.Data.(*multiGrant); ok && d != nil {
		return d, nil
	}
	for _, k := range g.Keys {
		kv, err := b.ownerEntry(ctx, b.lockDir(k), g.Owner)
		if err != nil {
			return nil, err
		}
		if kv != nil {
			return &multiGrant{lease: clientv3.LeaseID(kv.Lease)}, nil
		}
	}
	return nil, nil
}

// lostOf reads every entry of d and returns the LostKeyError of the first
// key whose entry is gone, or nil.
func (b *Backend) lostOf(ctx context.Context, op string, keys []string, d *multiGrant) error {
	gets := make([]clientv3.Op, len(d.names))
	for i, n := range d.names {
		gets[i] = clientv3.OpGet(n)
	}
	resp, err := b.c.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return b.ctxErr(ctx, errorf("%s %q: %w", op, keys, err))
	}
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) == 0 || kvs[0].CreateRevision != d.rev {
			return fmt.Errorf("etcd: %s: %w", op, &driver.LostKeyError{Key: keys[i]})
		}
	}
	return nil
}

// RenewMulti renews the set's lease (one keepalive) and checks in one read
// that every entry is still there: otherwise a *driver.LostKeyError names
// the first key gone. etcd cannot change a lease's TTL: ttl is ignored.
func (b *Backend) RenewMulti(ctx context.Context, g driver.MultiGrant, ttl time.Duration) (time.Duration, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer b.leave(ctx, cancel)
	d, ok := g.Data.(*multiGrant)
	if !ok || d == nil {
		return 0, errorf("renew set %q: not a grant of this backend: %w", g.Keys, driver.ErrNotHeld)
	}
	// Every entry is read before the keepalive: a set one of whose keys
	// is gone is refused before its lease is extended, so the renewal
	// extends none of the others (multilocktest.LostKeyRenewExtendsNone).
	// An entry deleted between the read and the keepalive is found at the
	// next renewal, as one deleted just after a renewal is.
	if err := b.lostOf(ctx, "renew set", g.Keys, d); err != nil {
		return 0, err
	}
	kattl, err := b.ka.renew(ctx, d.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, fmt.Errorf("etcd: renew set: lease expired or revoked: %w", &driver.LostKeyError{Key: g.Keys[0]})
	}
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("renew set %q: %w", g.Keys, err))
	}
	return time.Duration(kattl) * time.Second, nil
}

// ReleaseMulti revokes the set's lease, which deletes every entry of the
// set at once; a *driver.LostKeyError names a key whose entry was already
// gone. For a clean-up (no Data) it revokes the lease of the owner's
// entries, if any.
func (b *Backend) ReleaseMulti(ctx context.Context, g driver.MultiGrant) error {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	d, err := b.multiOf(ctx, g)
	if err != nil {
		return b.ctxErr(ctx, errorf("release set %q: %w", g.Keys, err))
	}
	if d == nil {
		return errorf("release set %q: %w", g.Keys, driver.ErrNotHeld)
	}
	var lost error
	if d.names != nil {
		lost = b.lostOf(ctx, "release set", g.Keys, d)
	}
	if _, err := b.c.Revoke(ctx, d.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return b.ctxErr(ctx, errorf("release set %q: %w", g.Keys, err))
	}
	return lost
}
