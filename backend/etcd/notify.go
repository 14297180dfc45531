package etcd

// Release notifications ([driver.Notifier]) for the waiters that have no
// queue on the server: semaphore slots, sets of keys (multilock) and
// read-write locks. The plain lock's waiters queue (AcquireWait) and do
// not use them.
//
// A Watch subscribes to the Backend's two shared watches: the deletion
// watch of "locks/" (delwatch.go, which the queue waiters and the held
// keys' keepers share) and the release watch of "rwlocks/" (noteWatch
// here); both restart through sharedwatch.go's loop.
//
// Invariants (what makes "a release after Watch returns is delivered"
// hold):
//   - A subscription is registered under its watch's lock before Watch
//     returns, and the shared watch of its prefix is started then if it
//     does not run.
//   - While a watch runs (after its started), every deletion under its
//     prefix is dispatched, under that lock, to the subscriptions of its
//     directory at that moment.
//   - A watch (re)starting wakes every subscription once it runs (its
//     started): a deletion between the registration (or the end of the
//     previous watch) and that moment may not be dispatched, and the
//     wake-up stands for it. A spurious wake-up costs the waiter one
//     attempt; a missed one, a whole retry delay.

import (
	"context"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
)

// Watch starts watching key for releases: the channel receives a value
// (without blocking; its buffer of one holds a pending wake-up) each time
// an entry of key's lock queue or a read-write lease of the name key is
// deleted (a release, an expiry, a revoked lease: etcd tells them apart
// no better), and when the Backend's watch of them (re)starts, since a
// deletion may have been missed meanwhile. The watches of every call
// share two etcd watches per Backend (the deletion watch of "locks/",
// which the lock's own waiters and holders use too, and one on
// "rwlocks/", started on first use), so a waiter costs the server
// nothing. stop ends the watch; it must be called exactly once. Wake-ups
// are at most once: a waiter still retries at its own pace.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, fmt.Errorf("etcd: watch: %w", err)
	}
	if err := b.begin(); err != nil {
		return nil, nil, err
	}
	defer b.wg.Done()
	ch := make(chan struct{}, 1)
	locks := b.dw.subscribeNote(b.lockDir(key), ch)
	rw := b.rwNote.subscribe(b, b.rwDir(key), ch)
	return ch, func() {
		b.dw.unsubscribeNote(locks)
		b.rwNote.unsubscribe(rw)
	}, nil
}

// noteWatch is the shared watch of the deletions under "rwlocks/",
// dispatched by directory (a read-write lock's name) to the
// subscriptions of Watch.
type noteWatch struct {
	mu     sync.Mutex
	watch  sharedWatch
	prefix string              // KeyPrefix + "rwlocks/", set at the start
	subs   map[string]*noteSub // by directory: the first of its subscriptions (chained by next)
}

// noteSub is one Watch's subscription to the deletions in dir.
type noteSub struct {
	dir  string
	ch   chan struct{}
	next *noteSub
}

func (s *noteSub) nextp() **noteSub { return &s.next }

// signal wakes the subscription's watcher without blocking. Under its
// watch's lock.
func (s *noteSub) signal() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// signalNotes wakes every subscription of m. Under its watch's lock.
func signalNotes(m map[string]*noteSub) {
	for _, s := range m {
		for ; s != nil; s = s.next {
			s.signal()
		}
	}
}

// signalDir wakes the subscriptions of m of the directory of key (its
// first path element after the n bytes of its watch's prefix, "/"
// included). Under its watch's lock.
func signalDir(m map[string]*noteSub, n int, key string) {
	i := strings.IndexByte(key[min(n, len(key)):], '/')
	if i < 0 {
		return
	}
	for s := m[key[:n+i+1]]; s != nil; s = s.next {
		s.signal()
	}
}

// subscribe registers ch for the deletions in dir, a directory of
// "rwlocks/", starting the watch if it does not run. The caller runs
// inside b.wg.
func (w *noteWatch) subscribe(b *Backend, dir string, ch chan struct{}) *noteSub {
	s := &noteSub{dir: dir, ch: ch}
	w.mu.Lock()
	defer w.mu.Unlock()
	push(&w.subs, dir, s)
	w.prefix = b.opts.KeyPrefix + "rwlocks/"
	w.watch.startLocked(b, "rwlocks/", w)
	return s
}

func (w *noteWatch) unsubscribe(s *noteSub) {
	unlinkUnder(&w.mu, &w.subs, s.dir, s)
}

// started wakes every subscription: a deletion may have been missed
// while the watch (re)started.
func (w *noteWatch) started(int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	signalNotes(w.subs)
}

func (w *noteWatch) progressed(int64) {}
func (w *noteWatch) ended()           {}

// deleted wakes the subscriptions of the directory of each deletion.
func (w *noteWatch) deleted(evs []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == clientv3.EventTypeDelete {
			signalDir(w.subs, len(w.prefix), string(ev.Kv.Key))
		}
	}
}
