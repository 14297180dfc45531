package etcd

// Proof that a held key is still ours, for each renewal of its lease.
//
// A keepalive proves only that the lease lives: a forced release (or an
// operator's delete) removes the key and leaves the lease alive, so the
// holder learns of it from the shared deletion watch alone. A watch can
// stall without ending (a member that stops sending events, a stream
// stuck behind a slow reader), and nothing then bounded how long the
// holder kept believing it held the lock. So after each renewal of a
// holder's lease (reported to the Locker at once, as the server confirmed
// it: the lease lives), its key is proven still ours at some moment after
// the renewal was sent, or found gone, which loses the lease:
//
//   - cheaply, for every lease of the Backend at once, by the watch: a
//     round reads a linearizable revision R (one Range of a single key,
//     count only) at t0, then asks the watch for its progress
//     (RequestProgress); once a progress notification at a revision >= R
//     arrives, every deletion committed before t0 has been dispatched
//     (the server sends a progress notification only when the watch is
//     synced, after every earlier event), so every holder whose renewal
//     was sent at or before t0 and whose key the watch has not reported
//     deleted still held its key at t0;
//   - else, when the round does not complete within half the shortest
//     renew interval of its keepers (the watch stalled or broken), or for
//     a keeper the watch may have missed a deletion of (told to re-read
//     its key, see delwatch.go, and not yet done), by one Range of each
//     such keeper's key: absent, or with another create revision, the
//     lease is lost (ErrNotHeld) at once.
//
// So a key deleted at T is reported lost by T + 2 renew intervals + the
// round trips of a keepalive and a Range at most, whatever the watch
// does: the first renewal sent after T (by T + one interval) cannot be
// proven by a round (the watch would have to dispatch the deletion first,
// which loses the lease at once), so its round (or the one in flight
// before it, then its own) times out after half an interval each, and the
// Range finds the key gone, provided the cluster answers that Range
// within half a renew interval. With no write in the cluster
// since the last progress notification, a round needs no progress
// request.
//
// Invariants:
//   - A keeper with an unproven renewal (pendSent set) is in the proof
//     (proving: in w.pend, or its Range runs) exactly once, until its
//     key is proven ours at a moment >= pendSent (then pendSent is
//     cleared), found gone (it ends, ErrNotHeld), or a Range fails (no
//     answer within half a renew interval: the renewal stays unproven,
//     and the next renewal's answer starts a proof again).
//   - At most one round runs; it ends when no keeper waits for a proof.
//   - w.prog is the highest revision of a progress notification of the
//     running watch, 0 while it (re)starts.

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
)

// progressRetries: a round asks the watch for its progress again every
// 1/progressRetries of its wait while the notification it needs has not
// come (the server sends none while a watcher of the stream is not
// synced, and one at a revision below R while its member lags).
const progressRetries = 4

// needProof is called, without locks, for a holder k whose renewal was
// confirmed by the server but whose key is not yet proven ours after it
// (k.proving was set by the caller). A round that already covers the
// renewal proves it at once.
func (w *delWatch) needProof(k *keeper) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch done, read := k.proofDone(w.confirmed, true); {
	case done:
		return
	case read:
		k.verify()
		return
	}
	w.pend = append(w.pend, k)
	if !w.proving {
		w.proving = true
		w.b.wg.Add(1) // the caller runs inside b.wg (its keeper has not ended)
		go func() {
			defer w.b.wg.Done()
			w.prove()
		}()
	}
}

// prove runs rounds until no keeper waits for a proof.
func (w *delWatch) prove() {
	ctx := w.b.closeCtx
	var keepers []*keeper
	for {
		w.mu.Lock()
		if len(w.pend) == 0 || ctx.Err() != nil {
			w.pend = nil
			w.proving = false
			w.mu.Unlock()
			return
		}
		wait := time.Duration(1<<63 - 1)
		for _, k := range w.pend {
			wait = min(wait, k.interval/2)
		}
		w.mu.Unlock()

		t0 := time.Now()
		ok := w.round(ctx, wait)

		w.mu.Lock()
		if ok && t0.After(w.confirmed) {
			w.confirmed = t0
		}
		keepers = append(keepers[:0], w.pend...)
		clear(w.pend)
		w.pend = w.pend[:0]
		for _, k := range keepers {
			switch done, read := k.proofDone(w.confirmed, true); {
			case done:
			case ok && !read:
				// Renewed after t0: the next round proves it.
				w.pend = append(w.pend, k)
			default:
				k.verify()
			}
		}
		w.mu.Unlock()
		clear(keepers)
	}
}

// round reads a linearizable revision and waits, up to wait, for the
// watch's progress to reach it. It reports whether it did: every deletion
// committed before the round began has then been dispatched.
func (w *delWatch) round(ctx context.Context, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := w.b.c.Get(ctx, w.b.opts.KeyPrefix+"locks/", clientv3.WithCountOnly())
	if err != nil {
		return false
	}
	rev := resp.Header.Revision
	retry := time.NewTicker(max(wait/progressRetries, time.Millisecond))
	defer retry.Stop()
	for {
		w.mu.Lock()
		prog, running := w.prog, w.from > 0
		w.mu.Unlock()
		if prog >= rev {
			return true
		}
		if running {
			// A request while the watch restarts would open a stream of
			// its own; the restarted watch is asked at the next retry.
			_ = w.b.c.RequestProgress(ctx)
		}
		select {
		case <-w.progWake:
		case <-retry.C:
		case <-ctx.Done():
			return false
		}
	}
}

// progressLocked records a progress notification of the running watch at rev.
// Under w.mu.
func (w *delWatch) progressLocked(rev int64) {
	if w.from > 0 && rev > w.prog {
		w.prog = rev
		select {
		case w.progWake <- struct{}{}:
		default:
		}
	}
}

// proofDone clears k's pending renewal if it was sent at or before
// proven, a moment at which k's key was proven present (byWatch: by a
// round of the watch; else by a read of the key), and reports whether k
// needs no further proof (proven, or ended) and, if it does, whether
// only a read of its key can give it: the watch may have missed the key's
// deletion (k was told to re-read its key, see delwatch.go), so a round
// proves nothing for k until that re-read is done. Under the watch's lock
// or none (it takes k's slot lock).
func (k *keeper) proofDone(proven time.Time, byWatch bool) (done, read bool) {
	s := k.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case k.state == kEnded || k.deleted > 0:
		return true, false // ended, or about to end: its key's deletion was dispatched
	case byWatch && (k.recheck || k.rechecking || k.rewatch):
		return false, true
	case k.pendSent.IsZero() || k.pendSent.After(proven):
		return false, false
	}
	k.pendSent, k.proving = time.Time{}, false
	return true, false
}

// verify proves k's key by reading it, in the background: the round
// could not. Called under the watch's lock with k.proving set.
func (k *keeper) verify() {
	b := k.b
	b.wg.Add(1) // k has not ended: it holds a count
	go func() {
		defer b.wg.Done()
		start := time.Now()
		gone, ok := b.recheck(b.closeCtx, k.d, k.interval/2)
		if gone {
			k.lose(errorf("lock key of %q deleted (found by a read of the key: the deletion watch did not prove it ours since its renewal): %w",
				k.key, driver.ErrNotHeld))
			return
		}
		if ok {
			if done, _ := k.proofDone(start, false); !done {
				// Renewed again while the read ran: prove that one too.
				b.dw.needProof(k)
			}
			return
		}
		// The read failed (a cluster too busy to answer a read within
		// half a renew interval): this renewal stays unproven; the next
		// one is proven again.
		k.slot.mu.Lock()
		k.pendSent, k.proving = time.Time{}, false
		k.slot.mu.Unlock()
	}()
}
