package etcd

// The shared deletion watch of held keys and its log of recent deletions.
//
// Invariants of the deletion log (what makes "no deletion is missed" hold):
//   - While the watch runs, from is set (> 0) and every deletion under the
//     prefix at a revision >= from is dispatched, in revision order, to the
//     subscribers of its key at that moment (each from its own from on: a
//     deletion before it is of an earlier key of the same name), and
//     recorded in recent and recentLog, under mu.
//   - recent holds, for every key deleted at a revision >= recentFrom, the
//     revision of its last such deletion; entries leave only from the old
//     end of recentLog (older than recentKeep or beyond recentMax), and
//     recentFrom then moves past them. So for revisions >= recentFrom the
//     log is complete.
//   - A subscriber (key, from) is registered under mu, so a deletion is
//     either dispatched to it or already in the log. If the log does not
//     reach back to from (from < recentFrom), or the watch is (re)starting
//     (from == 0), the subscriber is told to re-read its key; a restarted
//     watch tells every subscriber to re-read once it is running. A
//     re-read after the watch runs sees every deletion the watch cannot.

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Retention of the deletions the shared watch saw, for keys subscribed
// just after their deletion was dispatched.
const (
	recentKeep = 5 * time.Second
	recentMax  = 100000
)

// delWatch is the one watch per Backend that reports the deletion of held
// keys: a watch on Prefix+"locks/" (deletions only, from the current
// revision, so the server keeps it synced) that dispatches each deletion
// by key to the keepers subscribed to it. One watch per held key cost the
// server one watcher per lease, started at a past revision, and at
// thousands of leases that starved the renewals.
//
// A keeper subscribes with the revision from which it must hear of its
// key's deletion (one past the revision at which it was known to hold the
// lock). A deletion the watch dispatched before the subscription is found
// in a log of recent deletions; when the log or the watch does not reach
// back that far (the watch was just started or restarted), the keeper is
// told to re-read its key, which it does after the watch is running, so
// every later deletion reaches it.
type delWatch struct {
	b *Backend

	mu         sync.Mutex
	running    bool               // the watch goroutine runs
	from       int64              // deletions at revisions >= from are dispatched; 0 while (re)starting
	subs       map[string]*delSub // by etcd key: the first of its subscribers (chained by next)
	recent     map[string]int64   // key -> revision of its deletion, for revisions >= recentFrom
	recentLog  []recentDel        // the same, in revision order, for pruning
	recentFrom int64
}

type recentDel struct {
	key string
	rev int64
	at  time.Time
}

// delSub is one keeper's subscription to its key's deletion. The watch
// tells the keeper, under the watch's lock (so k.notify must not block or
// take it): k.notify(rev) with the deletion's revision, or k.notify(0) to
// re-read the key (a deletion may have been missed).
type delSub struct {
	key  string
	from int64 // deletions at earlier revisions are of an earlier key of the same name
	k    *keeper
	next *delSub // another subscriber of the same key (rare)
}

// subscribe registers k's interest in key's deletions at revisions >=
// from. It never blocks on the server. The caller runs inside b.wg.
func (w *delWatch) subscribe(k *keeper, key string, from int64) *delSub {
	s := &delSub{key: key, from: from, k: k}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = make(map[string]*delSub)
	}
	s.next = w.subs[key]
	w.subs[key] = s
	if !w.running {
		w.running = true
		w.b.wg.Add(1)
		go func() {
			defer w.b.wg.Done()
			w.run()
		}()
	}
	// Deletions the watch already dispatched are in the recent log (for
	// revisions >= recentFrom >= from of the watch); later ones reach s.
	switch rev := w.recent[key]; {
	case w.from == 0:
		// Starting: every subscriber is told to re-read once it runs.
	case rev > 0 && rev >= from:
		k.notify(rev)
	case from < w.recentFrom:
		// The log does not reach back to from.
		k.notify(0)
	}
	return s
}

func (w *delWatch) unsubscribe(s *delSub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch first := w.subs[s.key]; {
	case first == s && s.next == nil:
		delete(w.subs, s.key)
	case first == s:
		w.subs[s.key] = s.next
	default:
		for p := first; p != nil; p = p.next {
			if p.next == s {
				p.next = s.next
				break
			}
		}
	}
}

// run keeps the watch open until the backend is closed.
func (w *delWatch) run() {
	ctx := w.b.closeCtx
	prefix := w.b.opts.KeyPrefix + "locks/"
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		wch := w.b.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		for wr := range wch {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			if wr.Created {
				// The watch delivers every deletion after the revision in
				// this header (it may start earlier: never later).
				w.b.opts.Logger.Debug("etcd: deletion watch running", "from", wr.Header.Revision+1)
				w.mu.Lock()
				w.from = wr.Header.Revision + 1
				w.recent, w.recentLog, w.recentFrom = make(map[string]int64), nil, w.from
				for _, s := range w.subs {
					for ; s != nil; s = s.next {
						s.k.notify(0)
					}
				}
				w.mu.Unlock()
				continue
			}
			w.dispatch(wr.Events)
		}
		cancel()
		if ctx.Err() == nil {
			w.b.opts.Logger.Debug("etcd: deletion watch ended; restarting", "after", watchRetry)
		}
		w.mu.Lock()
		w.from = 0
		w.mu.Unlock()
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

func (w *delWatch) dispatch(evs []*clientv3.Event) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		if ev.Type != clientv3.EventTypeDelete {
			continue
		}
		key, rev := string(ev.Kv.Key), ev.Kv.ModRevision
		w.recent[key] = rev
		w.recentLog = append(w.recentLog, recentDel{key: key, rev: rev, at: now})
		for s := w.subs[key]; s != nil; s = s.next {
			// A pooled lease reused on the same lock puts its key under
			// the same name (entry): the deletion of the previous holder's
			// key, dispatched late, is not the loss of this one.
			if rev >= s.from {
				s.k.notify(rev)
			}
		}
	}
	n := 0
	for n < len(w.recentLog) && (len(w.recentLog)-n > recentMax || now.Sub(w.recentLog[n].at) > recentKeep) {
		d := w.recentLog[n]
		if w.recent[d.key] == d.rev {
			delete(w.recent, d.key)
		}
		w.recentFrom = d.rev + 1
		n++
	}
	if n > 0 {
		w.recentLog = w.recentLog[n:]
	}
}
