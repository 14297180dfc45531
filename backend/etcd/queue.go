package etcd

// The FIFO queue of waiters: AcquireWait and its turns (enqueue, read the
// predecessor, watch it for deletion). Renewal of the waiter's lease while
// it waits is the renewal machinery's (keepalive.go, kastream.go); the
// queue only stops it when the turn ends.
//
// Invariants of the queue:
//   - A waiter holds the lock only once it is known that, at one revision,
//     its own entry still carries its create revision and no entry of the
//     directory has a lower one: a waiter whose entry vanished (lease
//     expired or revoked, key deleted) is never told it holds the lock.
//     It is known from the set of entries ahead of ours, read at a
//     revision at which our entry existed (the enqueue Txn, or a Txn that
//     checks our entry), less every deletion after that revision, which
//     the backend's one deletion watch (delwatch.go) dispatches in
//     revision order: the set empties at the revision of the last such
//     deletion, and our entry's deletion, if any, was dispatched first.
//     No entry can join the set: a new entry's create revision is higher
//     than ours.
//   - No deletion is missed: deletions dispatched before the waiter
//     subscribed are taken from the watch's log of recent deletions; when
//     the log or the watch does not reach back to the waiter's revision
//     (the watch starts or restarts), the waiter re-reads the set in one
//     Txn that checks its own entry, once the watch runs, and takes out
//     the deletions dispatched after that read; a read that began before
//     a restart of the watch is discarded and made again.
//   - A hand-off costs the waiter no request: the deletion of the last
//     entry ahead, from the watch it already has, tells it. Nothing per
//     release is sent to a waiter whose set does not hold the deleted key.
//   - A turn that ends without the lock (context, Close, lost lease,
//     transient error) revokes its lease, which deletes its entry: the
//     queue holds no entry of a waiter that left.

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
	backoff := 50 * time.Millisecond
	for restarts := 0; ; {
		g, err := b.wait(ctx, req)
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

// wait is one turn of AcquireWait with one lease: enqueue, then, behind a
// holder, wait for the deletion watch to empty the set of entries ahead.
func (b *Backend) wait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	dir := b.lockDir(req.Key)
	secs := ttlSeconds(req.TTL)
	lg, name, resp, err := b.enqueue(ctx, req, dir, secs)
	if err != nil {
		return driver.Grant{}, err
	}
	g := &grant{name: name, lease: lg.id, ttl: lg.ttl, renew: req.RenewInterval, secs: secs, lastSent: lg.sent}
	if !resp.Succeeded {
		// Our name is derived from our lease, which carries no key (pool
		// invariant): an existing entry is a bug. Nothing was put on the
		// lease.
		b.returnLease(secs, lg)
		return driver.Grant{}, errorf("acquire %q: queue entry already exists for this lease: %w", req.Key, driver.ErrInvalid)
	}
	g.rev = resp.Header.Revision
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(kvs) <= 1 {
		// Uncontended: our entry, put in the same Txn, is the only one.
		// The Locker's KeepAlive takes over.
		g.held = g.rev
		return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(g.rev), TTL: g.ttl, Sent: g.sent(), Data: g}, nil
	}
	driver.NoteQueued(ctx) // observe: queued behind a holder (a hand-off if granted)
	// Every other entry was created before ours (ours is the newest): they
	// are the entries ahead of us, and no entry can join them later.
	ahead := make(map[string]struct{}, len(kvs)-1)
	for _, kv := range kvs {
		if k := string(kv.Key); k != name {
			ahead[k] = struct{}{}
		}
	}
	w := b.startWaiter(ctx, req.Key, dir, g, ahead)
	if err := w.await(ctx); err != nil {
		return driver.Grant{}, w.fail(ctx, err)
	}
	w.stop()
	// The server can expire the lease at the earliest at the send time of
	// its last confirmed renewal plus its TTL.
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(g.rev), TTL: g.ttl, Sent: g.sent(), Data: g}, nil
}

// enqueue puts the waiter's entry, on a pooled or new lease, and reads the
// queue in the same Txn. A pooled lease found gone is replaced by a new
// one; a failed Txn revokes the lease (no entry of a waiter that left).
func (b *Backend) enqueue(ctx context.Context, req driver.AcquireRequest, dir string, secs int64) (pooledLease, string, *clientv3.TxnResponse, error) {
	for fresh := false; ; fresh = true { // fresh: a newly granted lease, after a pooled one was refused
		lg, reused, err := b.takeLease(ctx, secs, dir, fresh)
		if err != nil {
			if ctx.Err() != nil {
				return lg, "", nil, b.waitError(ctx, req.Key)
			}
			return lg, "", nil, errorf("acquire %q: lease grant: %w", req.Key, err)
		}
		name := entryIn(dir, lg.id)
		resp, err := b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", 0)).
			Then(clientv3.OpPut(name, driver.HolderID(req.Owner), clientv3.WithLease(lg.id)),
				clientv3.OpGet(dir, queueKeys...)).
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
			return lg, "", nil, withCleanup(err, rerr)
		}
		return lg, name, resp, nil
	}
}

// withCleanup adds to err the failure, if any, of revoking the lease of a
// waiter that leaves.
func withCleanup(err, revokeErr error) error {
	if revokeErr == nil {
		return err
	}
	return fmt.Errorf("%w (clean-up: revoking the waiter's lease failed, its queue entry expires with the lease: %v)", err, revokeErr)
}

// waiter is a queued turn: its grant, its subscription to the deletion
// watch and the keeper of its lease.
type waiter struct {
	b        *Backend
	key, dir string
	g        *grant
	ws       *waitSub
	renewals chan driver.Renewal
	k        *keeper
	kcancel  context.CancelFunc
}

// startWaiter keeps the waiter's lease alive while it waits (the keeper
// stops when this turn ends; the Locker's KeepAlive takes over after a
// grant) and subscribes it to the deletion watch.
func (b *Backend) startWaiter(ctx context.Context, key, dir string, g *grant, ahead map[string]struct{}) *waiter {
	kctx, kcancel := context.WithCancel(ctx)
	w := &waiter{b: b, key: key, dir: dir, g: g, renewals: make(chan driver.Renewal, 1), kcancel: kcancel}
	w.k = b.startKeeper(kctx, key, g, w.renewals, 0)
	w.ws = b.dw.subscribeWait(dir, g.name, g.rev, ahead)
	return w
}

// stop ends the subscription and the keeper.
func (w *waiter) stop() {
	w.b.dw.unsubscribeWait(w.ws)
	w.k.end(nil) // at once, on this goroutine: no hand-off to the context's
	w.kcancel()
	<-w.k.done
}

// fail ends a turn without the lock: it stops the waiter and revokes its
// lease, which deletes its entry.
func (w *waiter) fail(ctx context.Context, err error) error {
	w.stop()
	w.g.retire()
	rerr := w.b.revoke(w.g.lease)
	if ctx.Err() != nil {
		err = w.b.waitError(ctx, w.key)
	}
	return withCleanup(err, rerr)
}

// await waits for the deletion watch to see every entry ahead deleted (nil,
// with g.held set), our own entry deleted or our lease lost
// (errWaiterLost), or ctx to end; when the watch asks, it re-reads the
// queue.
func (w *waiter) await(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	for read := false; ; {
		if !read {
			woken, err := w.sleep(ctx)
			if err != nil {
				return err
			}
			if !woken {
				continue
			}
		}
		read = false
		st := w.b.dw.state(w.ws)
		if st.lostAt > 0 {
			return errWaiterLost
		}
		if st.heldAt > 0 {
			// The keepalive's watch of our entry starts at the revision
			// that handed us the lock, not one past it: a deletion of our
			// entry in that same revision (one Txn deleting the whole
			// queue) is then reported as its loss.
			w.g.held = st.heldAt - 1
			return nil
		}
		if !st.reread {
			continue
		}
		err := w.reread(ctx, st.gen)
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		if ctx.Err() != nil || errors.Is(err, errWaiterLost) {
			return err
		}
		// Transient (no leader, connection lost): read again after a
		// backoff; loss of our lease in the meantime is caught by the
		// Txn, the keeper or the watch.
		if err := w.pause(ctx, backoff, err); err != nil {
			return err
		}
		backoff = min(2*backoff, time.Second)
		read = true
	}
}

// sleep waits for the watch's signal (true), a renewal (false) or the end
// of the turn (an error).
func (w *waiter) sleep(ctx context.Context) (bool, error) {
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case r, ok := <-w.renewals:
		if lost(r, ok) {
			return false, errWaiterLost
		}
		return false, nil
	case <-w.ws.wake:
		return true, nil
	}
}

// pause waits d before a re-read that failed with err, ending early with
// err when ctx ends or with errWaiterLost when the lease is lost.
func (w *waiter) pause(ctx context.Context, d time.Duration, err error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return err
	case r, ok := <-w.renewals:
		if lost(r, ok) {
			return errWaiterLost
		}
	case <-t.C:
	}
	return nil
}

// lost reports whether a renewal received (ok false: the channel closed)
// says the waiter's lease is gone.
func lost(r driver.Renewal, ok bool) bool { return !ok || errors.Is(r.Err, driver.ErrNotHeld) }

// reread reads the entries ahead of ours again, when the watch may have
// missed deletions, and installs them for the watch generation gen.
// Checking our own entry in the same Txn is what keeps a waiter whose lease
// expired from taking the lock (errWaiterLost).
func (w *waiter) reread(ctx context.Context, gen int64) error {
	g := w.g
	resp, err := w.b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.name), "=", g.rev)).
		Then(clientv3.OpGet(w.dir, append(queueKeys[:len(queueKeys):len(queueKeys)], clientv3.WithMaxCreateRev(g.rev-1))...)).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errWaiterLost
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	ahead := make(map[string]struct{}, len(kvs))
	for _, kv := range kvs {
		ahead[string(kv.Key)] = struct{}{}
	}
	// If the watch restarted since (the read may predate it), it has
	// signalled: wait for that and read again.
	w.b.dw.install(w.ws, gen, resp.Header.Revision, ahead)
	return nil
}

// watchRetry is the pause before re-reading the queue after a watch ended
// without an event.
const watchRetry = 50 * time.Millisecond
