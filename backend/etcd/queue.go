package etcd

// The FIFO queue of waiters: AcquireWait and its turns (enqueue, read the
// predecessor, watch it for deletion). Renewal of the waiter's lease while
// it waits is the renewal machinery's (keepalive.go, kastream.go); the
// queue only stops it when the turn ends.
//
// Invariants of the queue:
//   - A waiter holds the lock only when one Txn, in which its own entry
//     still carries its create revision, finds no entry of the directory
//     with a lower create revision: a waiter whose entry vanished (lease
//     expired or revoked, key deleted) is never told it holds the lock.
//   - A predecessor's deletion is never missed: the watch starts at the
//     server's current revision, and once the server confirms it, one Txn
//     checks that the predecessor and our entry still exist; any deletion
//     after that Txn reaches the watch.
//   - A turn that ends without the lock (context, Close, lost lease,
//     transient error) revokes its lease, which deletes its entry: the
//     queue holds no entry of a waiter that left.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// errWaiterLost reports that a waiter's lease or queue entry vanished while
// it waited: it must start over, never take the lock with it.
var errWaiterLost = errors.New("etcd: waiter's lease expired or was revoked while waiting")

// AcquireWait blocks until req.Key is granted to req.Owner, in FIFO order of
// arrival, or until ctx is done. It keeps the waiter's lease alive while it
// waits. When ctx ends first it revokes the waiter's lease (deleting its
// queue entry) before returning an error wrapping
// [driver.ErrNotAcquired] and ctx.Err(). A waiter whose lease expired or
// was revoked while it waited is never granted the lock: it starts over at
// the end of the queue with a new lease (at most 16 times).
// A transient error (no leader, connection lost, request timed out) ends
// the turn the same way, after the same clean-up, and the wait starts over
// after a backoff of 50 ms doubling up to 1 s, for as long as ctx allows.
//
// The returned Grant's Sent is the send time of the lease's last confirmed
// renewal while it waited, and its TTL the lease's granted TTL, so the
// Locker's local deadline runs from the right moment however long the wait.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	defer b.leave(ctx, cancel)
	start := time.Now()
	backoff := 50 * time.Millisecond
	for restarts := 0; ; {
		g, err := b.wait(ctx, req, start)
		switch {
		case err == nil:
			return g, nil
		case ctx.Err() != nil, errors.Is(err, driver.ErrClosed), errors.Is(err, driver.ErrInvalid),
			errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrInvalidAuthToken):
			return g, err
		case errors.Is(err, errWaiterLost):
			if restarts++; restarts >= maxWaitRestarts {
				return driver.Grant{}, errorf("acquire %q: %w: gave up after %d restarts", req.Key, err, restarts)
			}
			b.opts.Logger.Debug("etcd: waiter's entry lost while waiting; re-queueing", "key", req.Key, "restarts", restarts)
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return driver.Grant{}, b.waitError(ctx, req.Key)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// waitError is returned when a wait's context ends first: it is both
// ErrNotAcquired and the context's error (or ErrClosed).
func (b *Backend) waitError(ctx context.Context, key string) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, driver.ErrClosed) {
		return errorf("acquire %q: %w", key, driver.ErrClosed)
	}
	return errorf("acquire %q: %w: %w", key, driver.ErrNotAcquired, ctx.Err())
}

// wait is one turn of AcquireWait with one lease.
func (b *Backend) wait(ctx context.Context, req driver.AcquireRequest, start time.Time) (driver.Grant, error) {
	dir := b.lockDir(req.Key)
	secs := ttlSeconds(req.TTL)
	var (
		lg   pooledLease
		name string
		resp *clientv3.TxnResponse
	)
	for fresh := false; ; fresh = true { // fresh: a newly granted lease, after a pooled one was refused
		var reused bool
		var err error
		if lg, reused, err = b.takeLease(ctx, secs, dir, fresh); err != nil {
			if ctx.Err() != nil {
				return driver.Grant{}, b.waitError(ctx, req.Key)
			}
			return driver.Grant{}, errorf("acquire %q: lease grant: %w", req.Key, err)
		}
		name = entryIn(dir, lg.id)
		resp, err = b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", 0)).
			Then(clientv3.OpPut(name, driver.HolderID(req.Owner), clientv3.WithLease(lg.id)),
				clientv3.OpGet(dir, firstCreate...)).
			Commit()
		if err != nil && reused && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The idle lease was revoked or expired: the Txn was refused
			// as a whole. Start again with a new lease.
			continue
		}
		if err != nil {
			rerr := b.revoke(lg.id)
			err = errorf("acquire %q: enqueue: %w", req.Key, err)
			if ctx.Err() != nil {
				err = b.waitError(ctx, req.Key)
			}
			if rerr != nil {
				err = fmt.Errorf("%w (clean-up: revoking the waiter's lease failed, its queue entry expires with the lease: %v)", err, rerr)
			}
			return driver.Grant{}, err
		}
		break
	}
	g := &grant{name: name, lease: lg.id, ttl: lg.ttl, secs: secs, lastSent: lg.sent}
	if !resp.Succeeded {
		// Our name is derived from our lease, which carries no key (pool
		// invariant): an existing entry is a bug. Nothing was put on the
		// lease.
		b.returnLease(secs, lg)
		return driver.Grant{}, errorf("acquire %q: queue entry already exists for this lease: %w", req.Key, driver.ErrInvalid)
	}
	g.rev = resp.Header.Revision
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].CreateRevision == g.rev {
		// Uncontended: we are first. The Locker's KeepAlive takes over.
		g.held = g.rev
		return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(g.rev), TTL: g.ttl, Sent: g.sent(), Data: g}, nil
	}

	// Keep the waiter's lease alive while it waits; the keeper stops when
	// this turn ends (the Locker's KeepAlive takes over after a grant).
	kctx, kcancel := context.WithCancel(ctx)
	renewals := make(chan driver.Renewal, 1)
	k := b.startKeeper(kctx, req.Key, g, renewals, 0)
	stopKeeper := func() { kcancel(); <-k.done }

	fail := func(err error) (driver.Grant, error) {
		stopKeeper()
		g.retire()
		rerr := b.revoke(g.lease)
		if ctx.Err() != nil {
			err = b.waitError(ctx, req.Key)
		}
		if rerr != nil {
			err = fmt.Errorf("%w (clean-up: revoking the waiter's lease failed, its queue entry expires with the lease: %v)", err, rerr)
		}
		return driver.Grant{}, err
	}

	backoff := 50 * time.Millisecond
	for g.held == 0 {
		// One step: if our entry still exists with our revision, read the
		// entry just before ours. Checking our own entry in the same Txn is
		// what keeps a waiter whose lease expired from taking the lock.
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", g.rev)).
			Then(clientv3.OpGet(dir, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(g.rev-1))...)).
			Commit()
		if err != nil {
			if ctx.Err() != nil {
				return fail(err)
			}
			// Transient (no leader, connection lost): retry; loss of our
			// lease in the meantime is caught by the Txn or the keeper.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return fail(err)
			case r, ok := <-renewals:
				t.Stop()
				if !ok || errors.Is(r.Err, driver.ErrNotHeld) {
					return fail(errWaiterLost)
				}
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if !resp.Succeeded {
			return fail(errWaiterLost)
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			g.held = resp.Header.Revision
			break
		}
		driver.NoteQueued(ctx) // observe: queued behind a holder (a hand-off if granted)
		lost, broke, err := b.waitDeleted(ctx, name, g.rev, kvs[0], renewals)
		if lost {
			return fail(errWaiterLost)
		}
		if err != nil {
			return fail(err)
		}
		if broke {
			// The watch ended without an event: re-read after a pause, so
			// a watch that keeps failing cannot make this loop spin.
			t := time.NewTimer(watchRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return fail(ctx.Err())
			case <-t.C:
			}
		}
	}
	stopKeeper()
	// The server can expire the lease at the earliest at the send time of
	// its last confirmed renewal plus its TTL.
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(g.rev), TTL: g.ttl, Sent: g.sent(), Data: g}, nil
}

// watchRetry is the pause before re-reading the queue after a watch ended
// without an event.
const watchRetry = 50 * time.Millisecond

// waitDeleted waits until pred (the entry just before ours) is deleted, the
// watch ends without an event (broke: the caller re-reads after a pause),
// ctx ends (err), or our lease is lost (lost). It also returns, with
// nothing set, as soon as a re-read shows that pred or our own entry (name,
// created at rev) changed: the caller's next step finds out which.
//
// The watch starts at the current revision, never at a past one: etcd
// serves a watch from a past revision through its unsynced-watcher path,
// which is resynchronised only every 100 ms, and under contention the
// revision just read is already in the past. A deletion between our read
// and the watch's creation would be missed, so once the server confirms the
// watch (WithCreatedNotify) one Txn checks that pred and our entry are
// still there: any deletion after that Txn comes after the watch started
// and reaches the watch.
func (b *Backend) waitDeleted(ctx context.Context, name string, rev int64, pred *mvccpb.KeyValue, renewals <-chan driver.Renewal) (lost, broke bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key := string(pred.Key)
	wch := b.c.Watch(wctx, key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case r, ok := <-renewals:
			if !ok || errors.Is(r.Err, driver.ErrNotHeld) {
				return true, false, nil
			}
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				return false, true, nil
			}
			if wr.Created {
				resp, err := b.c.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(name), "=", rev),
						clientv3.Compare(clientv3.CreateRevision(key), "=", pred.CreateRevision)).
					Commit()
				if err != nil {
					if ctx.Err() != nil {
						return false, false, ctx.Err()
					}
					return false, true, nil
				}
				if !resp.Succeeded {
					return false, false, nil
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return false, false, nil
				}
			}
		}
	}
}
