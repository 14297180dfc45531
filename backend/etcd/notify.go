package etcd

// Release notifications ([driver.Notifier]) for the waiters that have no
// queue on the server: semaphore slots, sets of keys (multilock) and
// read-write locks. The plain lock's waiters queue (AcquireWait) and do
// not use them.
//
// Invariants (what makes "a release after Watch returns is delivered"
// hold):
//   - A subscription is registered under mu before Watch returns, and the
//     shared watch of its prefix is started then if it does not run.
//   - While a watch runs (after its created event), every deletion under its prefix is
//     dispatched, under mu, to the subscriptions of its directory at that
//     moment.
//   - A watch (re)starting tells every subscription once it runs (its
//     created event): a deletion between the registration (or the end of
//     the previous watch) and that moment may not be dispatched, and the
//     wake-up stands for it. A spurious wake-up costs the waiter one
//     attempt; a missed one, a whole retry delay.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
)

// Watch starts watching key for releases: the channel receives a value
// (without blocking; its buffer of one holds a pending wake-up) each time
// an entry of key's lock queue or a read-write lease of the name key is
// deleted (a release, an expiry, a revoked lease: etcd tells them apart
// no better), and when the Backend's watch of them (re)starts, since a
// deletion may have been missed meanwhile. The watches of every call
// share two etcd watches per Backend (one on "locks/", one on
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
	locks := b.locksNote.subscribe(b, "locks/", b.lockDir(key), ch)
	rw := b.rwNote.subscribe(b, "rwlocks/", b.rwDir(key), ch)
	return ch, func() {
		b.locksNote.unsubscribe(locks)
		b.rwNote.unsubscribe(rw)
	}, nil
}

// noteWatch is one shared watch of the deletions under a prefix of the
// Backend's keys, dispatched by directory (the prefix and the first path
// element, "/" included: a lock's queue, a read-write lock's name) to the
// subscriptions of Watch.
type noteWatch struct {
	mu      sync.Mutex
	running bool                // the watch goroutine runs
	subs    map[string]*noteSub // by directory: the first of its subscriptions (chained by next)
}

// noteSub is one Watch's subscription to the deletions in dir.
type noteSub struct {
	dir  string
	ch   chan struct{}
	next *noteSub
}

func (s *noteSub) nextp() **noteSub { return &s.next }

// signal wakes the subscription's watcher without blocking. Under mu.
func (s *noteSub) signal() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// subscribe registers ch for the deletions in dir, under b's KeyPrefix +
// prefix, starting the watch of that prefix if it does not run. The
// caller runs inside b.wg.
func (w *noteWatch) subscribe(b *Backend, prefix, dir string, ch chan struct{}) *noteSub {
	s := &noteSub{dir: dir, ch: ch}
	w.mu.Lock()
	defer w.mu.Unlock()
	push(&w.subs, dir, s)
	if !w.running {
		w.running = true
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			w.run(b, b.opts.KeyPrefix+prefix)
		}()
	}
	return s
}

func (w *noteWatch) unsubscribe(s *noteSub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	unlink(w.subs, s.dir, s)
}

// run keeps the watch of prefix open until the backend is closed.
func (w *noteWatch) run(b *Backend, prefix string) {
	ctx := b.closeCtx
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		wch := b.c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		for wr := range wch {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			if wr.Created {
				b.opts.Logger.Debug("etcd: release watch running", "prefix", prefix, "from", wr.Header.Revision+1)
				w.mu.Lock()
				for _, s := range w.subs {
					for ; s != nil; s = s.next {
						s.signal()
					}
				}
				w.mu.Unlock()
				continue
			}
			w.dispatch(prefix, wr.Events)
		}
		cancel()
		if ctx.Err() == nil {
			b.opts.Logger.Debug("etcd: release watch ended; restarting", "prefix", prefix, "after", watchRetry)
		}
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// dispatch wakes the subscriptions of the directory of each deletion.
func (w *noteWatch) dispatch(prefix string, evs []*clientv3.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range evs {
		if ev.Type != clientv3.EventTypeDelete {
			continue
		}
		key := string(ev.Kv.Key)
		i := strings.IndexByte(key[min(len(prefix), len(key)):], '/')
		if i < 0 {
			continue
		}
		for s := w.subs[key[:len(prefix)+i+1]]; s != nil; s = s.next {
			s.signal()
		}
	}
}
