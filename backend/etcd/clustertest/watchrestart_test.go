package clustertest

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
)

// TestWatchGapWakesEveryone: the Backend's shared watches (the deletion
// watch of "locks/", which the queue's waiters and the Notifier's Watch
// callers of lock names share, and the watch of "rwlocks/") go down while
// a queue waiter and two Watch callers wait, and every awaited key is
// released during the gap. Whether the watch comes back by the client's
// own resumption (a connection reset: the deletions are delivered late),
// is compacted under it (the resumption fails with ErrCompacted and the
// Backend restarts the watch from the current revision: the deletions are
// never delivered) or talks to a member that was stopped and restarted
// meanwhile (compacted too), the waiter is granted the lock and each
// Watch caller is woken: nothing else would wake them (the waiter has no
// timer; a Watch caller's retry delay is its own affair).
func TestWatchGapWakesEveryone(t *testing.T) {
	t.Run("connection reset", func(t *testing.T) { watchGap(t, false, false) })
	t.Run("compacted during the gap", func(t *testing.T) { watchGap(t, true, false) })
	t.Run("member restarted and compacted", func(t *testing.T) { watchGap(t, true, true) })
}

// watchGap runs one case of TestWatchGapWakesEveryone: the gap compacts
// the cluster or not, and stops the waiters' member (restart) or cuts its
// connections.
func watchGap(t *testing.T, compact, restart bool) {
	e := newEnv(t)
	// The waiters' member: a follower (stopping it leaves the
	// leader in place) other than the admin client's (0).
	lead, fol := e.leader()
	wm, hm := fol[0], lead
	if wm == 0 {
		wm = fol[1]
	}
	logs := &recordLog{}
	bw, err := etcd.New(e.client(wm), etcd.Options{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bw.Close() })
	holder := e.backend(hm)
	ctx := ctxFor(t, 2*time.Minute)
	// Leases outlive the gap: only a missed wake-up can fail.
	req := func(key string) driver.AcquireRequest {
		return driver.AcquireRequest{Key: key, Owner: rand.Text(), TTL: 30 * time.Second}
	}

	// A queue waiter behind the holder.
	const qkey, lkey, rwkey = "gap-queue", "gap-lock", "gap-rw"
	qg, err := holder.Acquire(ctx, req(qkey))
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		g, err := bw.AcquireWait(ctx, req(qkey))
		if err == nil {
			err = bw.Release(context.Background(), g)
		}
		granted <- err
	}()
	e.waitEntries(qkey, 2)

	// Watch callers of a held lock and of a held read-write lock.
	lg, err := holder.Acquire(ctx, req(lkey))
	if err != nil {
		t.Fatal(err)
	}
	rwg, err := holder.AcquireRW(ctx, driver.RWRequest{AcquireRequest: req(rwkey), Mode: driver.Write})
	if err != nil {
		t.Fatal(err)
	}
	lch, lstop, err := bw.Watch(ctx, lkey)
	if err != nil {
		t.Fatal(err)
	}
	defer lstop()
	rwch, rwstop, err := bw.Watch(ctx, rwkey)
	if err != nil {
		t.Fatal(err)
	}
	defer rwstop()

	// Every watch runs (its start woke everyone; drop that).
	logs.waitRunning(t, etcd.DefaultKeyPrefix+"locks/", etcd.DefaultKeyPrefix+"rwlocks/")
	drain(lch)
	drain(rwch)
	// One watch of "locks/" serves the waiter and the Watch callers.
	if n := logs.count("watch running"); n != 2 {
		t.Fatalf("%d watches started, want 2: one of \"locks/\" for queue waiters and Watch callers alike, one of \"rwlocks/\"", n)
	}
	restartsBefore := logs.count("restarting")

	// The gap: the waiters' member is unreachable.
	m := e.clus.Members[wm]
	if restart {
		m.Stop(t)
		var others []*integration.Member
		for i, o := range e.clus.Members {
			if i != wm {
				others = append(others, o)
			}
		}
		e.clus.WaitMembersForLeader(t, others)
	} else {
		br := m.Bridge()
		br.PauseConnections()
		br.DropConnections()
		t.Cleanup(br.UnpauseConnections)
	}
	if err := holder.Release(ctx, qg); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, lg); err != nil {
		t.Fatal(err)
	}
	if err := holder.ReleaseRW(ctx, rwg, driver.Write); err != nil {
		t.Fatal(err)
	}
	if compact {
		resp, err := e.admin.Get(ctx, "compact-here")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	if restart {
		if err := m.Restart(t); err != nil {
			t.Fatal(err)
		}
	} else {
		m.Bridge().UnpauseConnections()
	}

	const patience = 30 * time.Second // a bound on a failure, not a timing claim
	deadline := time.After(patience)
	for _, w := range []struct {
		what string
		ch   <-chan struct{}
	}{{"Watch of a released lock", lch}, {"Watch of a released read-write lock", rwch}} {
		select {
		case <-w.ch:
		case <-deadline:
			t.Fatalf("%s released while the watch was down: not woken within %v", w.what, patience)
		}
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("queue waiter: %v", err)
		}
	case <-deadline:
		t.Fatalf("queue waiter whose holder released while the watch was down: not granted within %v", patience)
	}
	t.Logf("every caller woken; the Backend restarted its watches %d times (0: the client resumed them itself)", logs.count("restarting")-restartsBefore)
}

func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// recordLog is a slog.Handler keeping every record's message and prefix
// attribute, for waiting on the Backend's debug records.
type recordLog struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct{ msg, prefix string }

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordLog) WithGroup(string) slog.Handler            { return h }

func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "prefix" {
			rec.prefix = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

// count counts the records whose message contains s.
func (h *recordLog) count(s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if strings.Contains(r.msg, s) {
			n++
		}
	}
	return n
}

// waitRunning waits (bounded) until the Backend's shared watch of each
// prefix has logged that it runs.
func (h *recordLog) waitRunning(t *testing.T, prefixes ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.mu.Lock()
		missing := 0
		for _, p := range prefixes {
			found := false
			for _, r := range h.recs {
				found = found || strings.Contains(r.msg, "watch running") && r.prefix == p
			}
			if !found {
				missing++
			}
		}
		h.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Backend's watches of %v did not all start within 30s", prefixes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
