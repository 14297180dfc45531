package etcd

// The restart loop of the Backend's shared watches: the deletion watch of
// "locks/" (delwatch.go: held keys' keepers, queue waiters and the
// Notifier's Watch callers of lock names) and the release watch of
// "rwlocks/" (notify.go: Watch callers of read-write lock names). Each is
// one etcd watch per Backend and prefix, deletions only, from the current
// revision, kept open until the Backend is closed.
//
// Invariants (what makes "no deletion is missed" hold for every
// subscriber of either kind):
//   - Between a started(rev) and the next ended(), every deletion under
//     the prefix at a revision > rev reaches deleted, in revision order.
//   - Whatever ends a watch (an error, ErrCompacted, a cancellation by the
//     server, its channel closed) is followed by ended(), a pause of
//     watchRetry, and a new watch from the then current revision, whose
//     started() is every handler's cue to wake or re-check all its
//     subscribers: a deletion between ended() and started() is never
//     dispatched. A gap the client bridges by itself (it resumes a watch
//     whose stream broke from its next revision) delivers the gap's
//     deletions late, through deleted, and ends nothing.

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchHandler is what a shared watch reports to. Its methods are called
// from the watch's goroutine only, in the order the watch saw things, and
// take the handler's own lock.
type watchHandler interface {
	// started: the watch runs, and reports every deletion at a revision
	// > rev. Every subscriber must be woken or re-check: a deletion
	// before it may not have been dispatched.
	started(rev int64)
	// progressed: a progress notification at rev (every deletion up to
	// rev was dispatched).
	progressed(rev int64)
	// deleted: the events of one watch response, in revision order.
	deleted(evs []*clientv3.Event)
	// ended: the watch ended; no deletion is dispatched until the next
	// started.
	ended()
}

// sharedWatch is the start of one shared watch, by its first subscriber.
type sharedWatch struct {
	running bool // the watch goroutine runs
}

// startLocked starts the watch of b's KeyPrefix + prefix, reporting to h,
// unless it runs. Under h's lock; the caller runs inside b.wg.
func (s *sharedWatch) startLocked(b *Backend, prefix string, h watchHandler) {
	if s.running {
		return
	}
	s.running = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.runWatch(b.opts.KeyPrefix+prefix, h)
	}()
}

// runWatch keeps a watch of the deletions under prefix open until the
// backend is closed, restarting it whenever it ends.
func (b *Backend) runWatch(prefix string, h watchHandler) {
	ctx := b.closeCtx
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		wch := b.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		var why error
		for wr := range wch {
			if err := wr.Err(); err != nil || wr.Canceled {
				why = err
				break
			}
			switch {
			case wr.IsProgressNotify():
				h.progressed(wr.Header.Revision)
			case wr.Created:
				// The watch delivers every deletion after the revision in
				// this header (it may start earlier: never later).
				b.opts.Logger.Debug("etcd: watch running", "prefix", prefix, "from", wr.Header.Revision+1)
				h.started(wr.Header.Revision)
			default:
				h.deleted(wr.Events)
			}
		}
		cancel()
		if ctx.Err() == nil {
			b.opts.Logger.Debug("etcd: watch ended; restarting", "prefix", prefix, "err", why, "after", watchRetry)
		}
		h.ended()
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
