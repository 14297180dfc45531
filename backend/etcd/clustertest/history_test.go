package clustertest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/history"
)

// TestPausedHolderHistory is the paused-holder workload of
// internal/pausetest on the 3-member cluster: workers (goroutines, each
// with its own client of a different member) increment a counter under
// the lock, reading it and writing counter+1 with FencedPut, and record
// every step in a history. The victim acquires first with ManualRenew and
// stops renewing between its read and its write (the pause), until its
// lease expired on the server and the others wrote. With fencing the
// history check passes and the victim's write is rejected; the negative
// control (plain Put) must fail the check.
func TestPausedHolderHistory(t *testing.T) {
	e := newEnv(t)
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		t.Run(name, func(t *testing.T) {
			res, victim := e.pauseWorkload(t, name, fenced)
			t.Logf("%s: %d writes attempted, %d accepted, %d rejected; paused holder's write: %s",
				name, res.Attempted, res.Accepted, res.Rejected, victim.Kind)
			err := res.Err()
			if fenced {
				if err != nil {
					t.Fatalf("with fencing the history check failed:\n%v", err)
				}
				if victim.Kind != history.Rejected {
					t.Fatalf("paused holder's write was %s, want rejected", victim.Kind)
				}
				return
			}
			if err == nil {
				t.Fatal("negative control: without fencing the history check passed; the test has no teeth")
			}
			if victim.Kind != history.Accepted || !res.Has(history.RuleStale) || !res.Has(history.RuleCounter) {
				t.Fatalf("negative control: paused holder's write %s; want it accepted and reported:\n%v", victim.Kind, err)
			}
			t.Logf("negative control, as required, fails the check:\n%v", err)
		})
	}
}

const pauseWorkers = 3

type pauseWorker struct {
	t       *testing.T
	c       *clientv3.Client
	b       *etcd.Backend
	l       *fencedlock.Locker
	rec     *history.Recorder
	lock    string
	counter string
	fenced  bool
}

func (e *env) pauseWorkload(t *testing.T, name string, fenced bool) (history.Result, history.Event) {
	path := filepath.Join(t.TempDir(), "history")
	lock, counter := "pause-"+name, "app/counter-"+name
	newWorker := func(member int, proc string, opts fencedlock.Options) *pauseWorker {
		c := e.client(member)
		b, err := etcd.New(c, etcd.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		opts.TTL, opts.ReleaseTimeout = ttl, time.Second
		l := mustLocker(t, b, opts)
		t.Cleanup(func() { l.Close() })
		rec, err := history.Open(path, proc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rec.Close() })
		return &pauseWorker{t: t, c: c, b: b, l: l, rec: rec, lock: lock, counter: counter, fenced: fenced}
	}
	ctx := ctxFor(t, 2*time.Minute)

	// The victim holds the lock first and never renews it.
	victim := newWorker(0, "victim", fencedlock.Options{ManualRenew: true})
	var paused time.Duration
	victimDone := make(chan error, 1)
	inside := make(chan struct{})
	resume := make(chan struct{})
	go func() {
		victimDone <- victim.round(ctx, func() {
			close(inside)
			start := time.Now()
			<-resume
			paused = time.Since(start)
		})
	}()
	select {
	case <-inside:
	case err := <-victimDone:
		t.Fatalf("victim: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("victim did not reach its critical section in 30s")
	}
	pausedAt := time.Now()

	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make([]error, pauseWorkers)
	for i := range pauseWorkers {
		w := newWorker(i%3, fmt.Sprintf("worker%d", i), fencedlock.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for r := 0; r < 1000 && time.Since(start) < 40*time.Second && !stop.Load(); r++ {
				if err := w.round(ctx, func() { time.Sleep(time.Millisecond) }); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	// The pause: past twice the TTL, and until the others wrote.
	time.Sleep(2*ttl - time.Since(pausedAt))
	if n, ok := history.WaitAccepted(path, "worker", 5, 30*time.Second); !ok {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("workers made %d writes in 30s (errors %v)", n, errs)
	}
	close(resume)
	var victimErr error
	select {
	case victimErr = <-victimDone:
	case <-time.After(30 * time.Second):
		victimErr = errors.New("victim did not finish in 30s")
	}
	time.Sleep(ttl / 4) // the others go on a little after the late write
	stop.Store(true)
	wg.Wait()
	if victimErr != nil {
		t.Fatalf("victim: %v", victimErr)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}

	rec, err := victim.b.FencedGet(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	value := rec.Value
	if value == "" {
		value = "0"
	}
	events, err := history.Finish(path, "parent", counter, value)
	if err != nil {
		t.Fatal(err)
	}
	vw, _ := history.LastWrite(events, "victim")
	t.Logf("victim paused %s (TTL %s); final counter %s; %d events", ms(paused), ms(ttl), value, len(events))
	return history.Check(events, history.Options{Initial: "0", Counter: true}), vw
}

// round is one read-modify-write of the counter under the lock; the
// outcome is recorded before the release.
func (w *pauseWorker) round(ctx context.Context, between func()) error {
	l, err := w.l.Acquire(ctx, w.lock)
	if err != nil {
		return err
	}
	ev := history.Event{Key: w.counter, Fence: l.Fence(), Holder: l.Holder()}
	if err := w.record(ev, history.Acquire, ""); err != nil {
		return err
	}
	rec, err := w.b.FencedGet(ctx, w.counter)
	if err != nil {
		return err
	}
	cur := rec.Value
	if cur == "" {
		cur = "0"
	}
	ev.Value = cur
	if err := w.record(ev, history.Read, ""); err != nil {
		return err
	}
	between()
	n, err := strconv.Atoi(cur)
	if err != nil {
		return fmt.Errorf("counter %q: %w", cur, err)
	}
	ev.Value, ev.RMW, ev.Base = strconv.Itoa(n+1), true, cur
	if err := w.record(ev, history.Attempt, ""); err != nil {
		return err
	}
	if w.fenced {
		err = w.b.FencedPut(ctx, w.counter, ev.Value, l.Fence(), l.Holder())
	} else {
		_, err = w.c.Put(ctx, w.counter, ev.Value)
	}
	switch {
	case err == nil:
		err = w.record(ev, history.Accepted, "")
	case errors.Is(err, fencing.ErrStale):
		err = w.record(ev, history.Rejected, err.Error())
	}
	if err != nil {
		return err
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return err
	}
	return nil
}

func (w *pauseWorker) record(ev history.Event, kind history.Kind, msg string) error {
	ev.Kind, ev.Err = kind, msg
	return w.rec.Record(ev)
}
