package etcd

// Renewal of held leases (KeepAlive) and of a waiter's lease (keep): a
// schedule of keepalives on the shared streams (kastream.go) and a
// subscription to the shared deletion watch (delwatch.go).
//
// Invariants: every Renewal carries the send time of the request the server
// confirmed (taken before sending), never a later one; a lease is reported
// lost (ErrNotHeld) only on the server's word (lease not found, key deleted
// or recreated); a keeper whose subscription could not be proven complete
// re-reads its key once the watch runs, and again after the next renewal
// if that read failed.

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/fencedlock/fencedlock/driver"
)

// KeepAlive keeps g's lease alive until ctx is done or the backend is
// closed: one etcd keepalive every TTL/3 on one of the backend's shared
// keepalive streams, counted from the send time of the last confirmed
// renewal, and a subscription to the backend's shared watch of deleted
// keys. It sends a Renewal with the request's send time and the TTL the
// server applied after each confirmed renewal, a Renewal whose Err is
// transient after a failed one (retried after TTL/12), and a final Renewal
// wrapping [driver.ErrNotHeld] when the server answers that the lease
// is gone or the shared watch sees g's key deleted; then it closes the
// channel. A channel closed while ctx is not done means the lease can no
// longer be kept alive. A pending Renewal not yet received is replaced by
// a newer one.
func (b *Backend) KeepAlive(ctx context.Context, g driver.Grant) <-chan driver.Renewal {
	out := make(chan driver.Renewal, 1)
	d, ok := g.Data.(*grant)
	if !ok || d == nil {
		out <- driver.Renewal{Err: errorf("keepalive %q: grant was not made by this backend: %w", g.Key, driver.ErrNotHeld)}
		close(out)
		return out
	}
	if err := b.begin(); err != nil {
		close(out)
		return out
	}
	go func() {
		defer b.wg.Done()
		defer close(out)
		ctx, cancel := b.withClose(ctx)
		defer cancel()
		b.keep(ctx, g.Key, d, out, d.held+1)
	}()
	return out
}

// offer sends r on out, replacing a pending value: out has a buffer of one
// and a single sender, so the send never blocks.
func offer(out chan driver.Renewal, r driver.Renewal) {
	for {
		select {
		case out <- r:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// keep renews d's lease until ctx ends or the lease is lost. With watchFrom
// > 0 it also subscribes to the deletion of d's key at revisions from
// watchFrom on (one past the revision at which d was known to hold the
// lock) and reports it; d.rev must then be set and no longer change.
func (b *Backend) keep(ctx context.Context, key string, d *grant, out chan driver.Renewal, watchFrom int64) {
	interval := max(d.ttl/3, 10*time.Millisecond)
	retry := max(interval/4, 5*time.Millisecond)

	var (
		deleted <-chan int64
		recheck <-chan struct{}
		rewatch bool
	)
	if watchFrom > 0 {
		sub := b.dw.subscribe(d.name, watchFrom)
		defer b.dw.unsubscribe(sub)
		deleted, recheck = sub.deleted, sub.recheck
	}
	lost := func(err error) {
		offer(out, driver.Renewal{Sent: time.Now(), Err: err})
	}

	timer := time.NewTimer(max(time.Until(d.sent().Add(interval)), 0))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rev := <-deleted:
			lost(errorf("lock key of %q deleted at revision %d (lease expired or revoked, or key removed): %w",
				key, rev, driver.ErrNotHeld))
			return
		case <-recheck:
			// The shared watch (re)started after our key was last known to
			// exist: re-read it now that the watch runs.
			if gone, ok := b.recheck(ctx, d, interval); gone {
				lost(errorf("lock key of %q deleted: %w", key, driver.ErrNotHeld))
				return
			} else if !ok {
				rewatch = true // read failed: try again after the next renewal
			}
		case <-timer.C:
			sent := time.Now()
			// Wait for the answer as long as it can still keep the lease
			// (until its expiry as last confirmed, and at least one
			// interval): the server answers a stream's renewals one by
			// one, so on a busy stream a slow answer comes before any
			// retry would, and a retry only lengthens the queue. A stream
			// silent for a whole interval is still dropped at once.
			// The deletion of our key is still reported while it waits.
			rctx, cancel := context.WithDeadline(ctx, later(d.sent().Add(d.ttl), sent.Add(interval)))
			type answer struct {
				ttl int64
				err error
			}
			ans := make(chan answer, 1)
			go func() {
				ttl, err := b.ka.renew(rctx, d.lease, interval)
				ans <- answer{ttl, err}
			}()
			var a answer
			select {
			case a = <-ans:
			case rev := <-deleted:
				cancel()
				<-ans
				lost(errorf("lock key of %q deleted at revision %d (lease expired or revoked, or key removed): %w",
					key, rev, driver.ErrNotHeld))
				return
			}
			cancel()
			ttl, err := a.ttl, a.err
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				lost(errorf("lease of %q expired or revoked: %w", key, driver.ErrNotHeld))
				return
			case ctx.Err() != nil:
				return
			case err != nil:
				offer(out, driver.Renewal{Sent: sent, Err: errorf("keepalive %q: %w", key, err)})
				timer.Reset(retry)
				continue
			}
			d.renewed(sent)
			offer(out, driver.Renewal{Sent: sent, TTL: time.Duration(ttl) * time.Second})
			timer.Reset(max(time.Until(sent.Add(interval)), 0))
			if rewatch {
				if gone, ok := b.recheck(ctx, d, interval); gone {
					lost(errorf("lock key of %q deleted: %w", key, driver.ErrNotHeld))
					return
				} else if ok {
					rewatch = false
				}
			}
		}
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// recheck reads d's key when the shared watch may have missed its
// deletion. It reports whether the key is gone (or is another's), and
// whether the read succeeded (if not, try again later).
func (b *Backend) recheck(ctx context.Context, d *grant, timeout time.Duration) (gone, ok bool) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := b.c.Get(rctx, d.name)
	if err != nil {
		return false, false
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != d.rev {
		return true, true
	}
	return false, true
}
