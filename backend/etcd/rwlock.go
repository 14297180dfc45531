package etcd

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Read-write locks ([driver.RWLocker]), under "rwlocks/NAME/": each reader
// is a key under "r/", the writer a key under "w/", each on a lease of its
// own (named by the lease ID, as the lock's entries), and a waiting
// writer's intent a key under "i/" named by its holder id, on a lease of
// the intent's TTL. Every step is one Txn: a reader is put only if no key
// exists under "w/" and "i/", a writer only if none exists under "r/" and
// "w/" (compares on a prefix). The fence is the revision of the granting
// Txn: etcd's revisions increase over the whole store, so every later
// grant of the name, read or write, has a greater one. Waiters are woken
// by the deletion of any key of the name (a release, an expiry, an intent
// removed) through the Backend's Watch (notify.go).

var _ driver.RWLocker = (*Backend)(nil)

// rwGrant is the private data of a read-write lock's Grant.
type rwGrant struct {
	name  string // our etcd key, under r/ or w/
	lease clientv3.LeaseID
	rev   int64 // create revision of name: the fence
}

// rwDir is the directory of the read-write lock name, ending in "/".
func (b *Backend) rwDir(name string) string {
	return b.opts.KeyPrefix + "rwlocks/" + url.PathEscape(name) + "/"
}

// rwSub is the subdirectory of mode m's holders.
func rwSub(m driver.RWMode) string {
	if m == driver.Write {
		return "w/"
	}
	return "r/"
}

// AcquireRW makes one attempt to take req.Key in req.Mode: one Txn that
// puts our key on a new lease if no conflicting key exists, or, for a
// writer with an intent, puts the intent instead.
func (b *Backend) AcquireRW(ctx context.Context, req driver.RWRequest) (driver.Grant, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	defer b.leave(ctx, cancel)
	op := req.Mode.String() + " acquire"
	dir, hid := b.rwDir(req.Key), driver.HolderID(req.Owner)
	lg, err := b.c.Grant(ctx, ttlSeconds(req.TTL))
	if err != nil {
		return driver.Grant{}, b.ctxErr(ctx, errorf("%s %q: lease grant: %w", op, req.Key, err))
	}
	name := entryIn(dir+rwSub(req.Mode), lg.ID)
	conflict := []string{dir + "w/", dir + "i/"}
	then := []clientv3.Op{clientv3.OpPut(name, hid, clientv3.WithLease(lg.ID))}
	var orElse []clientv3.Op
	var intent clientv3.LeaseID
	if req.Mode == driver.Write {
		conflict[1] = dir + "r/"
		// The Get reads the intent of this owner's attempt before, whose
		// lease the Delete leaves empty (revoked below).
		then = append(then, clientv3.OpGet(dir+"i/"+hid), clientv3.OpDelete(dir+"i/"+hid))
		if req.Intent > 0 {
			il, err := b.c.Grant(ctx, ttlSeconds(req.Intent))
			if err != nil {
				b.revokeAsync(lg.ID)
				return driver.Grant{}, b.ctxErr(ctx, errorf("%s %q: intent lease grant: %w", op, req.Key, err))
			}
			intent = il.ID
			// Likewise, when the Put moves it to this attempt's lease.
			orElse = append(orElse, clientv3.OpGet(dir+"i/"+hid), clientv3.OpPut(dir+"i/"+hid, "", clientv3.WithLease(intent)))
		}
	}
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(conflict[0]), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(conflict[1]), "=", 0).WithPrefix()).
		Then(then...).Else(orElse...).Commit()
	if err != nil || resp.Succeeded {
		if intent != 0 {
			b.revokeAsync(intent) // carries nothing, or an intent no longer wanted
		}
	}
	if err != nil {
		b.revokeAsync(lg.ID) // removes whatever the Txn may have put on it
		return driver.Grant{}, b.ctxErr(ctx, errorf("%s %q: %w", op, req.Key, err))
	}
	if !resp.Succeeded {
		b.revokeAsync(lg.ID)
		if intent != 0 {
			b.revokeEarlierIntent(resp, 0, intent)
		}
		return driver.Grant{}, errorf("%s: %w", op, &driver.HeldError{Key: req.Key})
	}
	if req.Mode == driver.Write {
		b.revokeEarlierIntent(resp, 1, intent)
	}
	rev := resp.Header.Revision
	d := &rwGrant{name: name, lease: lg.ID, rev: rev}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(rev), TTL: time.Duration(lg.TTL) * time.Second, Data: d}, nil
}

// revokeEarlierIntent revokes the lease of the intent a writer's Txn
// (resp, whose i-th response read it) moved onto this attempt's intent
// lease (refused) or deleted (granted): a waiting writer attempts again at
// every release of a reader, and each attempt's lease would otherwise
// stay, empty, until its TTL.
func (b *Backend) revokeEarlierIntent(resp *clientv3.TxnResponse, i int, intent clientv3.LeaseID) {
	if len(resp.Responses) <= i {
		return
	}
	if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) == 1 {
		if prev := clientv3.LeaseID(kvs[0].Lease); prev != 0 && prev != intent {
			b.revokeAsync(prev)
		}
	}
}

// rwGrantOf returns g's private data if it is a lease of mode m, or, for
// a Grant made without it (the Locker's clean-up), looks the key up by
// holder id under m's subdirectory; nil if there is none.
func (b *Backend) rwGrantOf(ctx context.Context, g driver.Grant, m driver.RWMode) (*rwGrant, error) {
	sub := b.rwDir(g.Key) + rwSub(m)
	if d, ok := g.Data.(*rwGrant); ok && d != nil {
		if !strings.HasPrefix(d.name, sub) {
			return nil, nil // a lease of the other mode
		}
		return d, nil
	}
	kv, err := b.ownerEntry(ctx, sub, g.Owner)
	if err != nil || kv == nil {
		return nil, err
	}
	return &rwGrant{name: string(kv.Key), lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}, nil
}

// RenewRW renews g's lease (one keepalive) and checks that our key still
// carries our create revision; etcd cannot change a lease's TTL, so the
// granted TTL is returned. An error wrapping [driver.ErrNotHeld] if the
// lease or the key is gone, or g is not a lease of mode m.
func (b *Backend) RenewRW(ctx context.Context, g driver.Grant, m driver.RWMode, _ time.Duration) (time.Duration, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer b.leave(ctx, cancel)
	op := m.String() + " renew"
	d, err := b.rwGrantOf(ctx, g, m)
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
	}
	if d == nil {
		return 0, errorf("%s %q: %w", op, g.Key, driver.ErrNotHeld)
	}
	kattl, err := b.ka.renew(ctx, d.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, errorf("%s %q: lease expired or revoked: %w", op, g.Key, driver.ErrNotHeld)
	}
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
	}
	resp, err := b.c.Get(ctx, d.name)
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != d.rev {
		return 0, errorf("%s %q: key deleted: %w", op, g.Key, driver.ErrNotHeld)
	}
	return time.Duration(kattl) * time.Second, nil
}

// ReleaseRW deletes g's key if it still carries g's create revision, and
// the intent of g's owner, in one Txn, then revokes g's lease in the
// background; an error wrapping [driver.ErrNotHeld] if g held no lease of
// mode m.
func (b *Backend) ReleaseRW(ctx context.Context, g driver.Grant, m driver.RWMode) error {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	op := m.String() + " release"
	d, err := b.rwGrantOf(ctx, g, m)
	if err != nil {
		return b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
	}
	dropIntent := clientv3.OpDelete(b.rwDir(g.Key) + "i/" + driver.HolderID(g.Owner))
	if d == nil {
		if _, err := b.c.Do(ctx, dropIntent); err != nil {
			return b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
		}
		return errorf("%s %q: %w", op, g.Key, driver.ErrNotHeld)
	}
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(d.name), "=", d.rev)).
		Then(clientv3.OpDelete(d.name), dropIntent).
		Else(dropIntent).Commit()
	b.revokeAsync(d.lease) // it carried only our key
	if err != nil {
		return b.ctxErr(ctx, errorf("%s %q: %w", op, g.Key, err))
	}
	if !resp.Succeeded {
		return errorf("%s %q: %w", op, g.Key, driver.ErrNotHeld)
	}
	return nil
}

var _ driver.RWInspector = (*Backend)(nil)

// InspectRW reports the writer and readers of the read-write lock name
// (holder id, fence: the create revision, remaining lease: an upper
// bound in whole seconds, as Inspect's) and the number of waiting
// writers' intents, from one range read of its directory and one lease
// lookup per holder. Fence is 0: etcd keeps no record of the last fence
// granted (see Inspect). It changes nothing.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.RWInfo, error) {
	const op = "inspect read-write lock"
	ctx, cancel, err := b.enterKey(ctx, op, name)
	if err != nil {
		return driver.RWInfo{}, err
	}
	defer b.leave(ctx, cancel)
	dir := b.rwDir(name)
	resp, err := b.c.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return driver.RWInfo{}, b.ctxErr(ctx, errorf("%s %q: %w", op, name, err))
	}
	var info driver.RWInfo
	for _, kv := range resp.Kvs {
		sub := strings.TrimPrefix(string(kv.Key), dir)
		if strings.HasPrefix(sub, "i/") {
			info.Intents++
			continue
		}
		l := driver.RWLease{Holder: string(kv.Value), Fence: fencing.Token(kv.CreateRevision)}
		if kv.Lease != 0 {
			tr, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return driver.RWInfo{}, b.ctxErr(ctx, errorf("%s %q: %w", op, name, err))
			}
			if tr.TTL < 0 {
				continue // expired since the range was read
			}
			l.TTL = remaining(tr)
		}
		switch {
		case strings.HasPrefix(sub, "w/"):
			info.Writer = &l
		case strings.HasPrefix(sub, "r/"):
			info.Readers = append(info.Readers, l)
		}
	}
	return info, nil
}
