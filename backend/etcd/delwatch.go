package etcd

// The shared deletion watch of held keys and its log of recent deletions.
// Its restart loop is sharedwatch.go's; the Notifier's Watch callers of
// lock names (notify.go) are its subscribers too.
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
//
// The Notifier's Watch callers of lock names subscribe to the same watch
// by queue directory (notes): each deletion in it, and each (re)start of
// the watch, wakes them.
type delWatch struct {
	b *Backend

	mu         sync.Mutex
	watch      sharedWatch
	from       int64               // deletions at revisions >= from are dispatched; 0 while (re)starting
	subs       map[string]*delSub  // by etcd key: the first of its subscribers (chained by next)
	waiters    map[string]*waitSub // by queue directory: the first of its waiters (chained by next)
	notes      map[string]*noteSub // by queue directory: the first of its Watch callers (chained by next)
	recent     map[string]int64    // key -> revision of its deletion, for revisions >= recentFrom
	recentLog  []recentDel         // the same, in revision order, for pruning
	recentFrom int64

	// The proof of held keys (prove.go):
	prog      int64         // highest revision of a progress notification of the running watch; 0 while (re)starting
	progWake  chan struct{} // buffer 1: a progress notification arrived
	confirmed time.Time     // every deletion committed before it was dispatched (the start of the last complete round)
	pend      []*keeper     // holders whose renewal awaits the next round
	proving   bool          // a round runs
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

// startLocked starts the watch goroutine unless it runs. Under w.mu; the
// caller runs inside b.wg.
func (w *delWatch) startLocked() {
	w.watch.startLocked(w.b, "locks/", w)
}

// subscribe registers k's interest in key's deletions at revisions >=
// from. It never blocks on the server. The caller runs inside b.wg.
func (w *delWatch) subscribe(k *keeper, key string, from int64) *delSub {
	s := &delSub{key: key, from: from, k: k}
	w.mu.Lock()
	defer w.mu.Unlock()
	push(&w.subs, key, s)
	w.startLocked()
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
	unlinkUnder(&w.mu, &w.subs, s.key, s)
}

// unlinkUnder is unlink under mu, the lock of the watch that keeps *m.
func unlinkUnder[T any, P chained[T]](mu *sync.Mutex, m *map[string]P, key string, s P) {
	mu.Lock()
	defer mu.Unlock()
	unlink(*m, key, s)
}

// chained is a subscription kept in a list per key (delSub, waitSub):
// next returns the address of its link to the next one.
type chained[T any] interface {
	*T
	nextp() **T
}

func (s *delSub) nextp() **delSub   { return &s.next }
func (s *waitSub) nextp() **waitSub { return &s.next }

// push puts s first in m's list of key, making m if it is nil. Under w.mu.
func push[T any, P chained[T]](m *map[string]P, key string, s P) {
	if *m == nil {
		*m = make(map[string]P)
	}
	*s.nextp() = (*m)[key]
	(*m)[key] = s
}

// unlink takes s out of m's list of key, and the key out of m with its
// last subscription. Under w.mu.
func unlink[T any, P chained[T]](m map[string]P, key string, s P) {
	first := m[key]
	if first == s {
		if next := *s.nextp(); next != nil {
			m[key] = next
		} else {
			delete(m, key)
		}
		return
	}
	for p := first; p != nil; p = *p.nextp() {
		if *p.nextp() == (*T)(s) {
			*p.nextp() = *s.nextp()
			return
		}
	}
}

// started is the watch's (re)start: deletions after rev are dispatched
// from now on; every subscriber re-reads (a keeper its key, a waiter its
// queue) and every Watch caller is woken, for the deletions that may have
// been missed.
func (w *delWatch) started(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.from = rev + 1
	w.recent, w.recentLog, w.recentFrom = make(map[string]int64), nil, w.from
	for _, s := range w.subs {
		for ; s != nil; s = s.next {
			s.k.notify(0)
		}
	}
	for _, ws := range w.waiters {
		for ; ws != nil; ws = ws.next {
			ws.rereadNow()
		}
	}
	signalNotes(w.notes)
}

func (w *delWatch) progressed(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progressLocked(rev)
}

func (w *delWatch) deleted(evs []*clientv3.Event) { w.dispatch(evs) }

func (w *delWatch) ended() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.from, w.prog = 0, 0
}

// subscribeNote registers a Watch caller's ch for the deletions in the
// queue directory dir, starting the watch if it does not run. The caller
// runs inside b.wg.
func (w *delWatch) subscribeNote(dir string, ch chan struct{}) *noteSub {
	s := &noteSub{dir: dir, ch: ch}
	w.mu.Lock()
	defer w.mu.Unlock()
	push(&w.notes, dir, s)
	w.startLocked()
	return s
}

func (w *delWatch) unsubscribeNote(s *noteSub) {
	unlinkUnder(&w.mu, &w.notes, s.dir, s)
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
		if len(key) > entryIDLen {
			for ws := w.waiters[key[:len(key)-entryIDLen]]; ws != nil; ws = ws.next {
				ws.deletion(key, rev)
			}
		}
		if len(w.notes) > 0 {
			signalDir(w.notes, len(w.b.opts.KeyPrefix)+len("locks/"), key)
		}
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

// waitSub is one waiter's view of its queue, kept by the deletion watch:
// the entries ahead of the waiter's own, read at one revision, less every
// deletion the watch dispatched since. Entries are only ever added behind
// the newest, so once that set is empty, and the waiter's own entry was
// not deleted first, the waiter holds the lock at the revision of the
// deletion that emptied it, learnt from that one watch event with no
// further request. The deletion watch is one watch per Backend whose
// events arrive in revision order, so "own entry not deleted before" is
// known too. Every field but dir, own, from and wake is under the watch's
// lock.
type waitSub struct {
	dir  string // the queue directory (lockDir)
	own  string // the waiter's entry
	from int64  // one past the own entry's create revision: earlier deletions are of earlier keys of the same names
	wake chan struct{}
	next *waitSub

	ahead   map[string]struct{} // entries ahead, not yet seen deleted; valid unless reread
	heldAt  int64               // the revision at which ahead became empty (0: not yet)
	lostAt  int64               // the revision at which own was deleted (0: not seen)
	reread  bool                // ahead may miss deletions: the waiter must re-read the queue
	gen     int64               // bumped at every (re)start of the watch: a read from before it is stale
	deleted map[string]int64    // while reread: key -> revision of its last deletion dispatched since
}

// entryIDLen is the length of the lease ID that ends an entry's name.
const entryIDLen = 16

// signal wakes the waiter without blocking. Under the watch's lock.
func (ws *waitSub) signal() {
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// deletion is the watch's report that key, in ws's directory, was deleted
// at rev. Under the watch's lock.
func (ws *waitSub) deletion(key string, rev int64) {
	switch {
	case rev < ws.from:
		return
	case key == ws.own:
		if ws.lostAt == 0 {
			ws.lostAt = rev
			ws.signal()
		}
		return
	case ws.reread:
		if ws.deleted == nil {
			ws.deleted = make(map[string]int64)
		}
		ws.deleted[key] = rev
		return
	}
	if _, ok := ws.ahead[key]; !ok {
		return
	}
	delete(ws.ahead, key)
	if len(ws.ahead) == 0 && ws.heldAt == 0 && ws.lostAt == 0 {
		ws.heldAt = rev
		ws.signal()
	}
}

// rereadNow tells the waiter that the watch (re)started: deletions may
// have been missed, so it must read the queue again. Under the watch's
// lock.
func (ws *waitSub) rereadNow() {
	ws.reread = true
	ws.gen++
	ws.deleted = nil
	ws.signal()
}

// waitState is what the watch knows of a waiter's queue.
type waitState struct {
	heldAt, lostAt int64
	reread         bool
	gen            int64
}

// subscribeWait registers a waiter whose entry own in dir was created at
// rev, with the entries ahead of it at that revision (ahead, which it
// keeps). Deletions the watch already dispatched are taken from the log of
// recent deletions; if the log or the watch does not reach back to rev+1,
// the waiter is told to re-read (at once if the watch runs, else once it
// runs). The caller runs inside b.wg and calls unsubscribeWait.
func (w *delWatch) subscribeWait(dir, own string, rev int64, ahead map[string]struct{}) *waitSub {
	ws := &waitSub{dir: dir, own: own, from: rev + 1, wake: make(chan struct{}, 1), ahead: ahead}
	w.mu.Lock()
	defer w.mu.Unlock()
	push(&w.waiters, dir, ws)
	w.startLocked()
	switch {
	case w.from == 0:
		// Starting: told to re-read once it runs.
		ws.reread, ws.gen = true, 1
		return ws
	case ws.from < w.recentFrom:
		ws.rereadNow()
		return ws
	}
	if d := w.recent[own]; d >= ws.from {
		ws.lostAt = d
		ws.signal()
		return ws
	}
	var last int64
	for key := range ahead {
		if d := w.recent[key]; d >= ws.from {
			delete(ahead, key)
			last = max(last, d)
		}
	}
	if len(ahead) == 0 {
		ws.heldAt = max(last, rev)
		ws.signal()
	}
	return ws
}

// state returns what the watch knows of ws's queue.
func (w *delWatch) state(ws *waitSub) waitState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return waitState{heldAt: ws.heldAt, lostAt: ws.lostAt, reread: ws.reread, gen: ws.gen}
}

// install replaces ws's entries ahead with those a read at revision rev
// found (it keeps ahead), if the watch did not restart since the read
// began (gen): deletions dispatched since then and after rev are taken
// out. It reports false if the read is stale (the waiter reads again).
func (w *delWatch) install(ws *waitSub, gen, rev int64, ahead map[string]struct{}) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws.gen != gen || w.from == 0 {
		return false
	}
	var last int64
	for key, d := range ws.deleted {
		if _, ok := ahead[key]; ok && d > rev {
			delete(ahead, key)
			last = max(last, d)
		}
	}
	ws.ahead, ws.reread, ws.deleted = ahead, false, nil
	if len(ahead) == 0 && ws.heldAt == 0 && ws.lostAt == 0 {
		ws.heldAt = max(last, rev)
		ws.signal()
	}
	return true
}

func (w *delWatch) unsubscribeWait(ws *waitSub) {
	unlinkUnder(&w.mu, &w.waiters, ws.dir, ws)
}
