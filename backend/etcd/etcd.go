package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/closeonce"
)

// Defaults of [Options].
const (
	// DefaultKeyPrefix is the key prefix used when Options.KeyPrefix is
	// empty.
	DefaultKeyPrefix = "fencedlock/"
	// DefaultCleanupTimeout bounds the clean-up (lease revocation) after a
	// cancelled wait or a failed attempt, which runs detached from the
	// caller's cancellation.
	DefaultCleanupTimeout = 5 * time.Second
)

// maxWaitRestarts bounds how many times one AcquireWait starts over because
// its waiter's lease was lost while it waited.
const maxWaitRestarts = 16

// Options configures a [Backend]. The zero value means the documented
// defaults.
type Options struct {
	// KeyPrefix is prepended to every key the backend writes: lock queues
	// live under KeyPrefix+"locks/", fence records of [FencedStore]
	// under KeyPrefix+"fences/", leaders' values of elections under
	// KeyPrefix+"elections/". Backends share locks only if they use the
	// same KeyPrefix on the same cluster. Default DefaultKeyPrefix. (The
	// same name and meaning as the Redis backends' Options.KeyPrefix.)
	KeyPrefix string
	// CleanupTimeout bounds the lease revocation that removes the trace of
	// a cancelled wait or a failed attempt; it runs detached from the
	// caller's context. Default DefaultCleanupTimeout; it must not be
	// negative.
	CleanupTimeout time.Duration
	// Logger receives debug records about keepalive streams and the
	// deletion watch (opened, ended, restarted) and about waits that start
	// over, and warnings when a clean-up (a lease revocation) fails. Records
	// carry lock names and lease IDs, never owner tokens. Default: no
	// logging. (The same field and meaning as the Redis backends'.)
	Logger *slog.Logger
}

func (o Options) resolve() (Options, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CleanupTimeout == 0 {
		o.CleanupTimeout = DefaultCleanupTimeout
	}
	if o.CleanupTimeout < 0 {
		return o, fmt.Errorf("etcd: CleanupTimeout %v is negative: %w", o.CleanupTimeout, driver.ErrInvalid)
	}
	return o, nil
}

// Backend is a [driver.Backend] on etcd. It also implements
// [driver.WaitAcquirer] (a FIFO queue of waiters on the server),
// [driver.KeepAliver] (renewal driven by the backend),
// [driver.Inspector], [driver.Elector] (election.go) and
// [driver.Notifier] (notify.go: for the waiters of semaphores, sets and
// read-write locks; the lock's own waiters queue). It is safe for
// concurrent use.
type Backend struct {
	c    *clientv3.Client
	opts Options

	closeCtx context.Context // cancelled by Close
	cancel   context.CancelFunc

	ka kaMux    // the keepalive streams shared by all leases
	dw delWatch // the watch of "locks/": deletions of held keys, for waiters and Watch
	// rwNote wakes the watches of Watch of read-write locks (notify.go).
	rwNote noteWatch
	pool   leasePool // idle leases, reused by later grants

	mu     sync.Mutex
	closed bool
	calls  map[context.Context]context.CancelCauseFunc // calls in progress (enter), cancelled by Close
	wg     sync.WaitGroup                              // goroutines and waits started by the backend
}

var (
	_ driver.Backend      = (*Backend)(nil)
	_ driver.WaitAcquirer = (*Backend)(nil)
	_ driver.KeepAliver   = (*Backend)(nil)

	_ driver.KeepAliveStopper = (*Backend)(nil)
	_ driver.Inspector        = (*Backend)(nil)
	_ driver.Notifier         = (*Backend)(nil)
)

// New returns a Backend on client. The Backend never closes client: close
// it yourself after [Backend.Close] (or [fencedlock.Locker.Close]).
// Invalid options or a nil client return an error wrapping
// [driver.ErrInvalid].
func New(client *clientv3.Client, opts Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("etcd: nil client: %w", driver.ErrInvalid)
	}
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{c: client, opts: o, closeCtx: ctx, cancel: cancel}
	b.ka.b, b.dw.b = b, b
	b.dw.progWake = make(chan struct{}, 1)
	for i := range b.ka.slots {
		b.ka.slots[i].mux, b.ka.slots[i].idx = &b.ka, i
	}
	return b, nil
}

// Options returns the options in effect, defaults filled in.
func (b *Backend) Options() Options { return b.opts }

// Close ends every goroutine the backend started (keepalives of held leases,
// waits in progress, which remove their queue entries) and waits for them.
// It does not close the client, and it does not release held locks: their
// leases are no longer renewed and expire after their TTL (use
// [fencedlock.Locker.Close] to release them first). Close is idempotent;
// calls after Close return errors wrapping [driver.ErrClosed].
func (b *Backend) Close() error {
	calls, first := closeonce.Take(&b.mu, &b.closed, &b.calls)
	if !first {
		return nil
	}
	for _, cancel := range calls {
		cancel(driver.ErrClosed)
	}
	b.cancel()
	b.wg.Wait()
	b.closePool()
	return nil
}

// begin registers a call or goroutine that Close must wait for.
func (b *Backend) begin() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("etcd: backend: %w", driver.ErrClosed)
	}
	b.wg.Add(1)
	return nil
}

// enter registers a call that Close must wait for and cancel: it returns
// ctx, also cancelled (cause ErrClosed) when the backend is closed, and its
// cancel function; the caller defers b.leave with both. After Close it
// returns an error wrapping ErrClosed. The call is registered in b.calls
// under the lock that begin takes anyway, rather than with
// context.AfterFunc on closeCtx: that cost four allocations per call more
// and a second lock (closeCtx's, shared by every call in flight).
func (b *Backend) enter(ctx context.Context) (context.Context, context.CancelCauseFunc, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel(nil)
		return nil, nil, fmt.Errorf("etcd: backend: %w", driver.ErrClosed)
	}
	b.wg.Add(1)
	if b.calls == nil {
		b.calls = make(map[context.Context]context.CancelCauseFunc)
	}
	b.calls[ctx] = cancel
	b.mu.Unlock()
	return ctx, cancel, nil
}

// enterKey is enter for a call on key, which it validates once the call
// is registered (op names the call in the error).
func (b *Backend) enterKey(ctx context.Context, op, key string) (context.Context, context.CancelCauseFunc, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := driver.ValidateKey(key); err != nil {
		b.leave(ctx, cancel)
		return nil, nil, fmt.Errorf("etcd: %s: %w", op, err)
	}
	return ctx, cancel, nil
}

// leave ends a call registered by enter.
func (b *Backend) leave(ctx context.Context, cancel context.CancelCauseFunc) {
	b.mu.Lock()
	delete(b.calls, ctx)
	b.mu.Unlock()
	cancel(nil)
	b.wg.Done()
}

// ttlSeconds rounds ttl up to whole seconds, at least 1.
func ttlSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return max(s, 1)
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("etcd: "+format, args...)
}

// Acquire makes one attempt to take req.Key: a Txn that creates our key
// with a lease of our own (an idle one from the backend's pool, or a newly
// granted one) only if no one holds or waits for the lock. If the lock is
// held or has waiters, the lease goes back to the pool and Acquire returns a *[driver.HeldError] (wrapping [driver.ErrNotAcquired])
// whose RetryAfter is the holder's remaining lease (at most; etcd reports
// it in whole seconds). The fence is the create
// revision of our key.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	defer b.leave(ctx, cancel)

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
			return driver.Grant{}, b.ctxErr(ctx, errorf("acquire %q: lease grant: %w", req.Key, err))
		}
		name = entryIn(dir, lg.id)
		resp, err = b.c.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(name, driver.HolderID(req.Owner), clientv3.WithLease(lg.id))).
			Else(clientv3.OpGet(dir, firstCreate...)).
			Commit()
		if err == nil {
			break
		}
		if reused && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The idle lease was revoked (by an operator) or expired: the
			// Txn was refused as a whole. Start again with a new lease.
			continue
		}
		// The Txn may have been applied: revoking our own lease removes
		// whatever it created, and nothing else.
		b.revoke(lg.id)
		return driver.Grant{}, b.ctxErr(ctx, errorf("acquire %q: %w", req.Key, err))
	}
	if !resp.Succeeded {
		// Nothing was put on the lease: it goes back to the pool.
		b.returnLease(secs, lg)
		held := &driver.HeldError{Key: req.Key}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].Lease != 0 {
			if tr, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease)); err == nil {
				held.RetryAfter = remaining(tr)
			}
		}
		return driver.Grant{}, fmt.Errorf("etcd: acquire: %w", held)
	}
	rev := resp.Header.Revision
	g := &grant{name: name, lease: lg.id, rev: rev, held: rev, ttl: lg.ttl, renew: req.RenewInterval, secs: secs, lastSent: lg.sent}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fencing.Token(rev), TTL: g.ttl, Sent: lg.sent, Data: g}, nil
}

// remaining is an upper bound of a lease's remaining time: etcd reports it
// truncated to whole seconds, so it lies in [TTL, TTL+1s), and never above
// the granted TTL. It is 0 for an expired lease.
func remaining(tr *clientv3.LeaseTimeToLiveResponse) time.Duration {
	if tr.TTL < 0 {
		return 0
	}
	return time.Duration(min(tr.TTL+1, max(tr.GrantedTTL, tr.TTL))) * time.Second
}

// ctxErr returns err, or, if ctx ended because the backend was closed, an
// error wrapping ErrClosed and err.
func (b *Backend) ctxErr(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), driver.ErrClosed) {
		return fmt.Errorf("%w: %w", err, driver.ErrClosed)
	}
	return err
}

// revoke revokes id, detached from any caller's cancellation and bounded
// by CleanupTimeout. Revoking a lease deletes the keys attached to it: only
// our own key. It reports whether the lease is gone.
func (b *Backend) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.CleanupTimeout)
	defer cancel()
	_, err := b.c.Revoke(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		b.opts.Logger.Warn("etcd: lease revocation failed; the lease expires with its TTL", "lease", int64(id), "err", err)
		return err
	}
	return nil
}

// grantOf returns g's private data, or, for a Grant made without it (the
// Locker's clean-up after a failed attempt), looks the entry up by owner:
// the queue entry whose value is the owner's holder id.
func (b *Backend) grantOf(ctx context.Context, g driver.Grant) (*grant, error) {
	if d, ok := g.Data.(*grant); ok && d != nil {
		return d, nil
	}
	kv, err := b.ownerEntry(ctx, b.lockDir(g.Key), g.Owner)
	if err != nil || kv == nil {
		return nil, err
	}
	return &grant{name: string(kv.Key), lease: clientv3.LeaseID(kv.Lease), rev: kv.CreateRevision}, nil
}

// ownerEntry returns the entry under prefix whose value is owner's holder
// id, or nil if there is none: how a clean-up (a Grant without its Data)
// finds the owner's entry.
func (b *Backend) ownerEntry(ctx context.Context, prefix, owner string) (*mvccpb.KeyValue, error) {
	resp, err := b.c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	hid := driver.HolderID(owner)
	for _, kv := range resp.Kvs {
		if string(kv.Value) == hid {
			return kv, nil
		}
	}
	return nil, nil
}

// Renew renews g's lease (one keepalive) and checks that our key still
// carries our create revision. etcd cannot change a lease's TTL, so ttl is
// ignored and the lease's granted TTL, as the server confirmed it, is
// returned. If the lease is gone or the key deleted, the error wraps
// [driver.ErrNotHeld].
func (b *Backend) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer b.leave(ctx, cancel)
	d, err := b.grantOf(ctx, g)
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("renew %q: %w", g.Key, err))
	}
	if d == nil {
		return 0, errorf("renew %q: %w", g.Key, driver.ErrNotHeld)
	}
	sent := time.Now()
	kattl, err := b.ka.renew(ctx, d.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, errorf("renew %q: lease expired or revoked: %w", g.Key, driver.ErrNotHeld)
	}
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("renew %q: %w", g.Key, err))
	}
	resp, err := b.c.Get(ctx, d.name)
	if err != nil {
		return 0, b.ctxErr(ctx, errorf("renew %q: %w", g.Key, err))
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != d.rev {
		return 0, errorf("renew %q: lock key deleted: %w", g.Key, driver.ErrNotHeld)
	}
	d.renewed(sent)
	return time.Duration(kattl) * time.Second, nil
}

// Release deletes g's key in a Txn only if it still carries g's create
// revision, and returns; g's lease, which carried only that key, then goes
// back to the backend's pool of idle leases for a later grant. If the key is
// gone or is another holder's, it deletes nothing and returns an error
// wrapping [driver.ErrNotHeld]; if the Txn fails, its error. In both
// cases g's lease, which may still carry g's key, is revoked in the
// background ([Backend.Close] waits for it), never reused. Fences survive: the next grant's key is
// created at a later revision.
func (b *Backend) Release(ctx context.Context, g driver.Grant) error {
	ctx, cancel, err := b.enter(ctx)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	d, err := b.grantOf(ctx, g)
	if err != nil {
		return b.ctxErr(ctx, errorf("release %q: %w", g.Key, err))
	}
	if d == nil {
		return errorf("release %q: %w", g.Key, driver.ErrNotHeld)
	}
	resp, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(d.name), "=", d.rev)).
		Then(clientv3.OpDelete(d.name)).
		Commit()
	switch {
	case err == nil && resp.Succeeded && d.secs > 0:
		// The Txn deleted our key, the only key ever put on this lease: the
		// lease carries none and goes back to the pool for the next grant.
		if d.retire() {
			b.returnLease(d.secs, pooledLease{id: d.lease, ttl: d.ttl, sent: d.sent(), dir: d.name[:len(d.name)-16]})
		}
	case d.lease != 0:
		// The Txn failed or its outcome is unknown (our key may remain on
		// the lease), or our key was already gone (the lease may be dying,
		// or be a lease this backend did not grant): revoke the lease in
		// the background (Close waits for it), which frees the lock at once
		// if our key remained. Never pooled. If the revocation fails, the
		// lease expires with its TTL.
		if d.retire() {
			b.revokeAsync(d.lease)
		}
	}
	if err != nil {
		return b.ctxErr(ctx, errorf("release %q: %w", g.Key, err))
	}
	if !resp.Succeeded {
		return errorf("release %q: %w", g.Key, driver.ErrNotHeld)
	}
	return nil
}

// Inspect reports the holder of key (the queue entry with the lowest create
// revision): its fence, holder id and remaining lease (an upper bound: etcd
// reports it truncated to whole seconds). Fence is 0 when the lock is
// free, not the last fence granted as the Redis and memory backends report
// it: etcd keeps no record of a released key's revision (see the package
// doc). It never returns an owner token (etcd stores only the holder id).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	ctx, cancel, err := b.enterKey(ctx, "inspect", key)
	if err != nil {
		return driver.Info{}, err
	}
	defer b.leave(ctx, cancel)
	resp, err := b.c.Get(ctx, b.lockDir(key), firstCreate...)
	if err != nil {
		return driver.Info{}, b.ctxErr(ctx, errorf("inspect %q: %w", key, err))
	}
	if len(resp.Kvs) == 0 {
		return driver.Info{}, nil
	}
	kv := resp.Kvs[0]
	info := driver.Info{Held: true, Fence: fencing.Token(kv.CreateRevision), Holder: string(kv.Value)}
	if kv.Lease != 0 {
		tr, err := b.c.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return driver.Info{}, b.ctxErr(ctx, errorf("inspect %q: %w", key, err))
		}
		info.TTL = remaining(tr)
	}
	return info, nil
}
