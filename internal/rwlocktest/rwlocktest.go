// Package rwlocktest holds the scenarios of package rwlock, run on each
// backend that implements driver.RWLocker (memory, real redis-server).
package rwlocktest

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/rwlock"
)

// Setup is what the scenarios need of a backend.
type Setup struct {
	// New returns an RWLock on a backend of its own, as another process
	// would have, closed when t ends.
	New func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock
	// Backend returns a backend of its own, closed when t ends.
	Backend func(t *testing.T) driver.RWLocker
	// Store is the backend's fenced store.
	Store fencing.Store
	// TTL is the short lease of the scenarios with a holder paused past it.
	TTL time.Duration
	// Intent is the intent of the crashed writer (0: 400ms), and
	// ExpirySlack how late the server may end it (0: 500ms).
	Intent, ExpirySlack time.Duration
}

// Scenario is one scenario, named as a subtest.
type Scenario struct {
	Name string
	Run  func(*testing.T, Setup)
}

// Scenarios returns every scenario, for a backend's table of subtests;
// NeverReaderAndWriter runs with workers and rounds. RetriedAcquire is not
// among them: backend/etcd answers a retried acquire otherwise (see
// docs/rwlock.md), memory and Redis run it by name.
func Scenarios(workers, rounds int) []Scenario {
	return []Scenario{
		{"ModesExclude", ModesExclude},
		{"NeverReaderAndWriter", func(t *testing.T, s Setup) { NeverReaderAndWriter(t, s, workers, rounds) }},
		{"WriterNotStarved", WriterNotStarved},
		{"PausedWriterRefused", PausedWriterRefused},
		{"CancelledWriterLeavesNothing", CancelledWriterLeavesNothing},
		{"CancelledWriterWakesReaders", CancelledWriterWakesReaders},
		{"CrashedWriterIntentExpires", CrashedWriterIntentExpires},
		{"Inspect", Inspect},
		{"TryLockLeavesNoIntent", TryLockLeavesNoIntent},
		{"PausedReaderLost", PausedReaderLost},
		{"CloseReleasesLeases", CloseReleasesLeases},
		{"ReservedNames", ReservedNames},
		{"CloseUnderLoad", CloseUnderLoad},
		{"ManyReadersThenWriter", ManyReadersThenWriter},
	}
}

func name(prefix string) string { return prefix + "-" + rand.Text()[:8] }

// retrying are the options of a waiter that must get a lease soon after
// one is free (short retry delays where the backend polls).
var retrying = fencedlock.Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 20 * time.Millisecond}

// take waits for a lease of n in mode m.
func take(ctx context.Context, r *rwlock.RWLock, n string, m rwlock.Mode) (*rwlock.Lease, error) {
	if m == rwlock.Read {
		return r.RLock(ctx, n)
	}
	return r.Lock(ctx, n)
}

func lock(t *testing.T, ctx context.Context, r *rwlock.RWLock, n string, m rwlock.Mode) *rwlock.Lease {
	t.Helper()
	l, err := take(ctx, r, n, m)
	if err != nil {
		t.Fatalf("%v lock %q: %v", m, n, err)
	}
	if l.Key() != n || l.Mode() != m {
		t.Fatalf("lease of %q %v: Key %q Mode %v", n, m, l.Key(), l.Mode())
	}
	return l
}

func wantRefused(t *testing.T, l *rwlock.Lease, err error, why string) {
	t.Helper()
	if err == nil {
		l.Release(context.Background())
		t.Fatalf("%s: granted (fence %v)", why, l.Fence())
	}
	if !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", why, err)
	}
}

func wantStale(t *testing.T, err error, accepted fencing.Token, why string) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Accepted != accepted {
		t.Fatalf("%s: %v, want a *fencing.StaleError having accepted %v", why, err, accepted)
	}
}

// ModesExclude: readers share a name, a writer excludes readers and
// writers, both ways, tried once each (TryRLock, TryLock).
func ModesExclude(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, b := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})
	n := name("modes")
	r1 := lock(t, ctx, a, n, rwlock.Read)
	r2, err := a.TryRLock(ctx, n) // the same RWLock: readers share
	if err != nil {
		t.Fatalf("second reader in the same RWLock: %v", err)
	}
	r3 := lock(t, ctx, b, n, rwlock.Read)
	w, err := b.TryLock(ctx, n)
	wantRefused(t, w, err, "TryLock while 3 readers hold")
	for _, r := range []*rwlock.Lease{r1, r2, r3} {
		if err := r.Release(ctx); err != nil {
			t.Fatalf("reader release: %v", err)
		}
	}
	w = lock(t, ctx, b, n, rwlock.Write)
	if w.Fence() <= r3.Fence() || w.Fence() <= r2.Fence() || w.Fence() <= r1.Fence() {
		t.Fatalf("writer fence %v not above the readers' %v %v %v", w.Fence(), r1.Fence(), r2.Fence(), r3.Fence())
	}
	r, err := a.TryRLock(ctx, n)
	wantRefused(t, r, err, "TryRLock while a writer holds")
	w2, err := a.TryLock(ctx, n)
	wantRefused(t, w2, err, "TryLock while a writer holds")
	if err := w.Release(ctx); err != nil {
		t.Fatalf("writer release: %v", err)
	}
	r = lock(t, ctx, a, n, rwlock.Read)
	if r.Fence() <= w.Fence() {
		t.Fatalf("reader after the writer has fence %v, not above the writer's %v", r.Fence(), w.Fence())
	}
	r.Release(ctx)
}

// NeverReaderAndWriter: goroutines of several RWLocks take read and write
// leases of one name in a bounded loop; a writer never holds with anyone
// else, checked while each lease is valid. A round whose lease was lost
// (its renewals late on a loaded machine: seen on etcd at load 20, with
// the cluster's heartbeats a second late) proves nothing either way, since
// others may rightly hold then: it is void and run again, at most rounds
// more times per worker, so that the check keeps its substance.
func NeverReaderAndWriter(t *testing.T, s Setup, workers, rounds int) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := name("exclusive")
	var readers, writers, maxReaders, voids atomic.Int64
	var bad atomic.Value
	var wg sync.WaitGroup
	for i := range workers {
		r := s.New(t, retrying)
		wg.Go(func() {
			for j, void := 0, 0; j < rounds; j++ {
				m := rwlock.Read
				if (i+j)%4 == 0 {
					m = rwlock.Write
				}
				l, err := take(ctx, r, n, m)
				if err != nil {
					bad.CompareAndSwap(nil, "lock: "+err.Error())
					return
				}
				overlap := exclusionRound(m, &readers, &writers, &maxReaders)
				if err := l.Release(ctx); err == nil && overlap == "" {
					continue
				} else if lost := l.Err(); errors.Is(lost, fencedlock.ErrLeaseLost) && void < rounds {
					// Lost before the check ended: the overlap, if
					// any, may be a rightful holder's. Again.
					void++
					voids.Add(1)
					j--
					continue
				} else if overlap != "" {
					bad.CompareAndSwap(nil, overlap)
				} else {
					bad.CompareAndSwap(nil, fmt.Sprintf("release: %v (lease: %v; %d rounds void already)", err, lost, void))
				}
				return
			}
		})
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	t.Logf("%d workers x %d rounds; at most %d readers at once; %d rounds void (a lease lost) and run again", workers, rounds, maxReaders.Load(), voids.Load())
}

// exclusionRound is one round of NeverReaderAndWriter while its lease of
// mode m is held: it counts the holder in, checks that a writer holds
// alone, holds 1ms and counts it out. It returns what overlapped, if
// anything.
func exclusionRound(m rwlock.Mode, readers, writers, maxReaders *atomic.Int64) (overlap string) {
	if m == rwlock.Write {
		if w := writers.Add(1); w != 1 || readers.Load() != 0 {
			overlap = "a writer held with others"
		}
	} else if readers.Add(1); writers.Load() != 0 {
		overlap = "a reader held with a writer"
	}
	if m == rwlock.Read {
		maxReaders.Store(max(maxReaders.Load(), readers.Load()))
	}
	time.Sleep(time.Millisecond)
	if m == rwlock.Write {
		writers.Add(-1)
	} else {
		readers.Add(-1)
	}
	return overlap
}

// PausedWriterRefused: a writer paused past its TTL (it never renews)
// loses the name, and its Context has ended when a reader comes in; a
// reader and then another writer come in; the paused
// writer's late write is refused by the fencing guard, whose newest fence
// is the second writer's, above the reader's and the first writer's; its
// late Release fails with ErrNotHeld and leaves the second writer holding.
func PausedWriterRefused(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paused := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true})
	other := s.New(t, retrying)
	n := name("paused")
	start := time.Now()
	a := lock(t, ctx, paused, n, rwlock.Write)
	r := lock(t, ctx, other, n, rwlock.Read) // waits until a expired on the server
	learnedFirst(t, a, "paused writer", "a reader")
	if waited := time.Since(start); waited < s.TTL {
		t.Fatalf("a reader came in %v after the writer, within its TTL of %v", waited, s.TTL)
	}
	if !errors.Is(a.Err(), fencedlock.ErrLeaseLost) {
		t.Fatalf("paused writer's Err = %v, want ErrLeaseLost", a.Err())
	}
	r.Release(ctx)
	b := lock(t, ctx, other, n, rwlock.Write)
	defer b.Release(ctx)
	if !(a.Fence() < r.Fence() && r.Fence() < b.Fence()) {
		t.Fatalf("fences writer %v, reader %v, writer %v: not increasing", a.Fence(), r.Fence(), b.Fence())
	}
	key := n + "/data"
	if err := s.Store.Set(ctx, key, "by b", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("b's write: %v", err)
	}
	wantStale(t, s.Store.Set(ctx, key, "late a", a.Fence(), a.Holder()), b.Fence(), "paused writer a's late write")
	if rec, err := s.Store.Get(ctx, key); err != nil || rec.Value != "by b" {
		t.Fatalf("stored %+v, %v after the refused write, want %q", rec, err, "by b")
	}
	if err := a.Release(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("paused writer's Release = %v, want ErrNotHeld", err)
	}
	pr, err := paused.TryRLock(ctx, n)
	wantRefused(t, pr, err, "TryRLock while writer b holds, after paused writer a's late Release")
	if err := b.Renew(ctx); err != nil || b.Err() != nil {
		t.Fatalf("writer b's renewal after paused writer a's late Release: %v (Err %v)", err, b.Err())
	}
}

// CancelledWriterLeavesNothing: a writer waiting behind a reader whose
// context ends returns ErrNotAcquired with the context's error, holds
// nothing and leaves no intent: a reader gets in at once.
func CancelledWriterLeavesNothing(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rl, wl := s.New(t, fencedlock.Options{}), s.New(t, retrying)
	n := name("cancel")
	r := lock(t, ctx, rl, n, rwlock.Read)
	for i := range 5 { // the context ends in a sleep or in an attempt
		wctx, wcancel := context.WithTimeout(ctx, time.Duration(50+i*17)*time.Millisecond)
		w, err := wl.Lock(wctx, n)
		wcancel()
		wantRefused(t, w, err, "writer behind a reader")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled writer: %v, want the context's error", err)
		}
		r2, err := rl.TryRLock(ctx, n)
		if err != nil {
			t.Fatalf("TryRLock after the writer gave up: %v, want no intent left", err)
		}
		r2.Release(ctx)
	}
	r.Release(ctx)
	w, err := rl.TryLock(ctx, n) // the cancelled writers hold nothing
	if err != nil {
		t.Fatalf("TryLock after every reader left: %v", err)
	}
	w.Release(ctx)
}

// CancelledWriterWakesReaders: a reader waiting only behind the intent of
// a writer whose Lock gives up is woken when that Lock removes the intent,
// as by a release that frees the name, not left asleep until its next
// look: with a MaxRetryDelay of 5s (an intent of 10.25s) it is granted
// within 2s of the end of the writer's Lock, not about 5s later.
func CancelledWriterWakesReaders(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	slow := fencedlock.Options{MaxRetryDelay: 5 * time.Second}
	hl, probe, wl, rl := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{}), s.New(t, slow), s.New(t, slow)
	n := name("wake")
	h := lock(t, ctx, hl, n, rwlock.Read) // the writer waits behind it
	defer h.Release(ctx)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wdone := make(chan error, 1)
	go func() { _, err := wl.Lock(wctx, n); wdone <- err }()
	for { // until the writer's intent refuses readers (bounded by ctx)
		p, err := probe.TryRLock(ctx, n)
		if err != nil {
			break
		}
		p.Release(ctx)
		time.Sleep(5 * time.Millisecond)
	}
	type result struct {
		l   *rwlock.Lease
		err error
	}
	rdone := make(chan result, 1)
	go func() { l, err := rl.RLock(ctx, n); rdone <- result{l, err} }()
	time.Sleep(300 * time.Millisecond) // the reader is refused and sleeps
	wcancel()
	if err := <-wdone; !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("the cancelled writer: %v, want ErrNotAcquired", err)
	}
	select {
	case res := <-rdone:
		if res.err != nil {
			t.Fatalf("the waiting reader: %v", res.err)
		}
		res.l.Release(ctx)
	case <-time.After(2 * time.Second):
		t.Fatalf("the waiting reader still waits 2s after the cancelled writer removed its intent")
	}
}

// CrashedWriterIntentExpires: the intent of a writer that crashed while
// waiting (registered through the driver, never removed) keeps readers
// out until it expires on the server, and no longer; it never grants the
// writer anything.
func CrashedWriterIntentExpires(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rl := s.New(t, fencedlock.Options{})
	n := name("crash")
	r := lock(t, ctx, rl, n, rwlock.Read)
	intent := cmp.Or(s.Intent, 400*time.Millisecond)
	rw := s.Backend(t)
	req := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: n, Owner: rand.Text(), TTL: time.Second}, Mode: driver.Write, Intent: intent}
	start := time.Now()
	if _, err := rw.AcquireRW(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("writer behind a reader: %v, want ErrNotAcquired", err)
	}
	r2, err := rl.TryRLock(ctx, n)
	if time.Since(start) < intent {
		wantRefused(t, r2, err, "a reader while a crashed writer's intent is live")
	} else if err == nil {
		r2.Release(ctx) // a loaded machine: too late to tell
	}
	time.Sleep(time.Until(start.Add(intent)))
	limit := start.Add(intent + cmp.Or(s.ExpirySlack, 500*time.Millisecond))
	for r2, err = rl.TryRLock(ctx, n); err != nil; r2, err = rl.TryRLock(ctx, n) { // bounded by limit
		if time.Now().After(limit) {
			t.Fatalf("TryRLock %v after the crashed writer's intent of %v: %v", time.Since(start), intent, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r2.Release(ctx)
	r.Release(ctx)
	if _, err := rw.RenewRW(ctx, driver.Grant{Key: n, Owner: req.Owner}, driver.Write, time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the crashed writer's renew: %v, want ErrNotHeld: it was never granted", err)
	}
}

// Inspect: a backend that is a driver.RWInspector reports a name's
// readers, writer and waiting writers' intents (holder ids, fences,
// leases), never an owner token, and apart from the plain lock of the
// same name. It skips a backend without InspectRW.
func Inspect(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := s.Backend(t)
	in, ok := b.(driver.RWInspector)
	if !ok {
		t.Skipf("%T is no driver.RWInspector", b)
	}
	const ttl = time.Minute // never reached: the scenario waits for nothing
	n := name("inspect")
	inspect := func(why string) driver.RWInfo {
		t.Helper()
		info, err := in.InspectRW(ctx, n)
		if err != nil {
			t.Fatalf("InspectRW %s: %v", why, err)
		}
		return info
	}
	acquire := func(owner string, m driver.RWMode) (driver.Grant, error) {
		return b.AcquireRW(ctx, driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: n, Owner: owner, TTL: ttl}, Mode: m, Intent: ttl})
	}
	wantLease := func(why string, l driver.RWLease, g driver.Grant) {
		t.Helper()
		if l.Holder != driver.HolderID(g.Owner) || l.Fence != g.Fence || l.TTL <= 0 || l.TTL > ttl+time.Second {
			t.Fatalf("%s: lease %+v, want holder %s, fence %v, TTL in (0, %v]", why, l, driver.HolderID(g.Owner), g.Fence, ttl)
		}
	}
	if info := inspect("of a name never taken"); info.Held() || info.Intents != 0 || info.Fence != 0 {
		t.Fatalf("name never taken: %+v", info)
	}
	owners := []string{"reader-1-secret-" + rand.Text(), "reader-2-secret-" + rand.Text(), "writer-secret-" + rand.Text()}
	var readers []driver.Grant
	for _, o := range owners[:2] {
		g, err := acquire(o, driver.Read)
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		readers = append(readers, g)
	}
	if _, err := acquire(owners[2], driver.Write); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("writer while two readers hold: %v, want ErrNotAcquired", err)
	}
	info := inspect("with two readers and a writer waiting")
	if info.Writer != nil || len(info.Readers) != 2 || info.Intents != 1 || (info.Fence != 0 && info.Fence != readers[1].Fence) {
		t.Fatalf("two readers and a waiting writer: %+v", info)
	}
	wantLease("reader 1", info.Readers[0], readers[0])
	wantLease("reader 2", info.Readers[1], readers[1])
	if pi, ok := b.(driver.Inspector); ok {
		plain, err := pi.Inspect(ctx, n)
		if err != nil || plain.Held {
			t.Fatalf("the plain lock of the name: %+v, %v; want free", plain, err)
		}
	}
	for _, g := range readers {
		if err := b.ReleaseRW(ctx, g, driver.Read); err != nil {
			t.Fatalf("reader release: %v", err)
		}
	}
	w, err := acquire(owners[2], driver.Write)
	if err != nil {
		t.Fatalf("writer once the readers left: %v", err)
	}
	info = inspect("with a writer")
	if info.Writer == nil || len(info.Readers) != 0 || info.Intents != 0 || (info.Fence != 0 && info.Fence != w.Fence) {
		t.Fatalf("a writer: %+v", info)
	}
	wantLease("writer", *info.Writer, w)
	if s := fmt.Sprintf("%+v %+v", info, *info.Writer); strings.Contains(s, "secret") {
		t.Fatalf("InspectRW shows an owner token: %s", s)
	}
	if err := b.ReleaseRW(ctx, w, driver.Write); err != nil {
		t.Fatalf("writer release: %v", err)
	}
	if info := inspect("once released"); info.Held() || info.Intents != 0 || (info.Fence != 0 && info.Fence != w.Fence) {
		t.Fatalf("once released: %+v", info)
	}
}
