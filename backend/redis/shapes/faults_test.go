package shapes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// expiryWatch samples PTTL of a key on a direct connection until the key is
// gone. Each sample gives a lower bound of the server-side expiry: the time
// the PTTL request was sent plus the PTTL the server answered.
type expiryWatch struct {
	mu     sync.Mutex
	expiry time.Time // latest lower bound of the server-side expiry
	gone   time.Time // first sample that found the key gone
	done   chan struct{}
	stop   context.CancelFunc
}

func watchExpiry(t *testing.T, c rueidis.Client, key string) *expiryWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	w := &expiryWatch{done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			sent := time.Now()
			pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
			if err == nil {
				w.mu.Lock()
				if pttl == -2 {
					w.gone = time.Now()
					w.mu.Unlock()
					return
				}
				if e := sent.Add(time.Duration(pttl) * time.Millisecond); e.After(w.expiry) {
					w.expiry = e
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// wait returns the expiry bound and when the key was seen gone.
func (w *expiryWatch) wait(t *testing.T) (expiry, gone time.Time) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the lock key never expired on the server")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone.IsZero() {
		t.Fatal("the lock key never expired on the server")
	}
	return w.expiry, w.gone
}

// TestNetworkFaults puts a TCP proxy between the holder and the server and
// injects a blackhole, a latency longer than the renew interval, and
// connection resets. In each case the holder reports the lease lost
// before the server-side TTL ends (measured against PTTL samples taken on
// a direct connection), and once the fault heals a new acquire through the
// same client works and gets the next fence.
func TestNetworkFaults(t *testing.T) {
	const ttl = time.Second // renew every 333ms, safety margin 101ms
	faults := []struct {
		name  string
		apply func(*faultproxy.Proxy)
	}{
		{"blackhole", func(p *faultproxy.Proxy) { p.Blackhole(true) }},
		{"latency 600ms each way", func(p *faultproxy.Proxy) { p.SetLatency(600 * time.Millisecond) }},
		{"connection resets", func(p *faultproxy.Proxy) { p.RefuseNew(true); p.ResetAll() }},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			px, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			holderClient := srv.Client(t, func(o *rueidis.ClientOption) { o.InitAddress = []string{px.Addr()} })
			direct := srv.Client(t, nil)
			b := newBackend(t, holderClient, redis.Options{})
			l := newLocker(t, b, fencedlock.Options{TTL: ttl})
			ctx := ctxT(t, 30*time.Second)

			ls, err := l.TryAcquire(ctx, "net")
			if err != nil {
				t.Fatal(err)
			}
			// Let a renewal or two go through first.
			time.Sleep(ttl / 2)
			if err := ls.Err(); err != nil {
				t.Fatalf("lost before the fault: %v", err)
			}
			w := watchExpiry(t, direct, b.LockKey("net"))
			faultAt := time.Now()
			f.apply(px)
			var lostAt time.Time
			select {
			case <-ls.Done():
				lostAt = time.Now()
			case <-time.After(5 * ttl):
				t.Fatal("lease not reported lost during the fault")
			}
			cause := context.Cause(ls.Context())
			if !errors.Is(cause, fencedlock.ErrLeaseLost) {
				t.Fatalf("cause %v, want ErrLeaseLost", cause)
			}
			expiry, gone := w.wait(t)
			if !lostAt.Before(expiry) {
				t.Fatalf("holder lost the lease at +%v, after the server-side expiry at +%v",
					lostAt.Sub(faultAt), expiry.Sub(faultAt))
			}
			t.Logf("%s: holder lost the lease %v after the fault, %v before the server-side expiry (key seen gone at +%v); cause: %v",
				f.name, lostAt.Sub(faultAt).Round(time.Millisecond), expiry.Sub(lostAt).Round(time.Millisecond),
				gone.Sub(faultAt).Round(time.Millisecond), cause)

			px.Heal()
			ls2, err := l.Acquire(ctxT(t, 20*time.Second), "net")
			if err != nil {
				t.Fatalf("acquire after healing: %v", err)
			}
			if ls2.Fence() != ls.Fence()+1 {
				t.Fatalf("fence after healing %d, want %d", ls2.Fence(), ls.Fence()+1)
			}
			if err := ls2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRestartWhileHeld restarts a standalone server while a lease is held.
// Without persistence the server forgets the lock: the holder's next
// renewal is told so (ErrNotHeld) and the lease is lost before its local
// deadline. With appendonly (after SIGTERM, or SIGKILL with appendfsync
// always) the lock and its fence counter survive and the lease stays held:
// the watchdog renews it through the restarted server and keeps it past the
// deadline it had before the restart, and the server agrees about its
// holder all along.
func TestRestartWhileHeld(t *testing.T) {
	// Longer than keptTTL: the renewal due after the restart fails on the
	// dead connection and a retry (every TTL/12) renews. With a 3s TTL the
	// first renewal through the restarted server was sent 1.1-1.6s after
	// it was up (two shapes suites in parallel), 1.0s before the local
	// deadline; with 2s a lease was lost under load. At 5s the deadline
	// comes 4.5s after the last renewal before the restart.
	const ttl = 5 * time.Second
	cases := []struct {
		name     string
		config   []string
		kill     bool
		survives bool
	}{
		{"no persistence, SIGTERM", nil, false, false},
		{"appendonly, SIGTERM", []string{"appendonly yes", "appendfsync everysec"}, false, true},
		{"appendonly fsync always, SIGKILL", []string{"appendonly yes", "appendfsync always"}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.StartRedis(t, testserver.WithConfig(tc.config...))
			b := newBackend(t, srv.Client(t, nil), redis.Options{})
			observer := newBackend(t, srv.Client(t, nil), redis.Options{})
			l := newLocker(t, b, fencedlock.Options{TTL: ttl})
			ctx := ctxT(t, 30*time.Second)
			ls, err := l.TryAcquire(ctx, "restart")
			if err != nil {
				t.Fatal(err)
			}
			deadline := ls.Deadline()
			restartAt := time.Now()
			if tc.kill {
				srv.Kill()
			}
			srv.Restart()
			upAt := time.Now()

			if !tc.survives {
				select {
				case <-ls.Done():
				case <-time.After(2 * ttl):
					t.Fatal("holder never told that the server forgot the lock")
				}
				lostAt := time.Now()
				cause := context.Cause(ls.Context())
				if !errors.Is(cause, driver.ErrNotHeld) {
					t.Fatalf("cause %v, want the server's answer (ErrNotHeld)", cause)
				}
				if !lostAt.Before(deadline) {
					t.Fatalf("lost at %v, after the local deadline %v", lostAt, deadline)
				}
				t.Logf("server down %v; holder told %v after the restart began, %v before its local deadline; the server had forgotten the lock for at most %v",
					upAt.Sub(restartAt).Round(time.Millisecond), lostAt.Sub(restartAt).Round(time.Millisecond),
					deadline.Sub(lostAt).Round(time.Millisecond), lostAt.Sub(restartAt).Round(time.Millisecond))
				info, err := observer.Inspect(ctx, "restart")
				for i := 0; err != nil && i < 50; i++ { // the observer's connection died with the server
					time.Sleep(20 * time.Millisecond)
					info, err = observer.Inspect(ctx, "restart")
				}
				if err != nil || info.Held || info.Fence != 0 {
					t.Fatalf("after restart: %+v, %v (the fence counter is gone too: fences restart)", info, err)
				}
				return
			}
			// Persisted: renewed through the restarted server and held past
			// its deadline from before the restart, the server agreeing.
			checks := 0
			var renewedAt time.Time // the first renewal after the restart
			for renewedAt.IsZero() || time.Now().Before(deadline) {
				if err := ls.Err(); err != nil {
					t.Fatalf("lease lost across a persisted restart (server down %v, lost %v after it was up): %v",
						upAt.Sub(restartAt).Round(time.Millisecond), time.Since(upAt).Round(time.Millisecond), err)
				}
				if renewedAt.IsZero() && renewedSince(l, ls, upAt) {
					renewedAt = lastRenewalSent(l, ls)
				}
				if time.Since(upAt) > 2*ttl {
					t.Fatalf("not renewed %v after the restart", 2*ttl)
				}
				info, err := observer.Inspect(ctx, "restart")
				if err == nil && (!info.Held || info.Holder != ls.Holder() || info.Fence != ls.Fence()) {
					t.Fatalf("holder believes it holds fence %d; server says %+v", ls.Fence(), info)
				}
				checks++
				time.Sleep(100 * time.Millisecond)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
			ls2, err := l.TryAcquire(ctx, "restart")
			if err != nil || ls2.Fence() != ls.Fence()+1 {
				t.Fatalf("after a persisted restart: %v, fence %d after %d", err, ls2.Fence(), ls.Fence())
			}
			t.Logf("server down %v; first renewal sent %v after it was up; lease held through it and %d agreeing server checks until %v after the restart; next fence %d",
				upAt.Sub(restartAt).Round(time.Millisecond), renewedAt.Sub(upAt).Round(time.Millisecond), checks,
				time.Since(restartAt).Round(time.Millisecond), ls2.Fence())
		})
	}
}

// TestScriptFlushWhileHeld flushes the script cache while leases are held:
// the watchdog's renewals and the releases fall back to EVAL and succeed.
func TestScriptFlushWhileHeld(t *testing.T) {
	srv := testserver.StartRedis(t)
	b := newBackend(t, srv.Client(t, nil), redis.Options{})
	l := newLocker(t, b, fencedlock.Options{TTL: keptTTL})
	ctx := ctxT(t, 30*time.Second)
	keys := []string{"flush/a", "flush/b", "flush/c"}
	var leases []*fencedlock.Lease
	for _, k := range keys {
		ls, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, ls)
	}
	acquired := time.Now()
	for _, ls := range leases { // one renewal each, through EVALSHA
		waitRenewed(t, l, ls, acquired)
	}
	evalBefore := commandCalls(t, srv, "eval")
	cliOK(t, srv, "SCRIPT", "FLUSH")
	flushed := time.Now()
	for _, ls := range leases { // renewed after the flush, through EVAL
		waitRenewed(t, l, ls, flushed)
	}
	evalAfterRenew := commandCalls(t, srv, "eval")
	if evalAfterRenew == evalBefore {
		t.Fatal("no EVAL after SCRIPT FLUSH: the renewals did not go through the fallback")
	}
	cliOK(t, srv, "SCRIPT", "FLUSH")
	for _, ls := range leases {
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("release after SCRIPT FLUSH: %v", err)
		}
	}
	for i, k := range keys {
		info, err := b.Inspect(ctx, k)
		if err != nil || info.Held || info.Fence != leases[i].Fence() {
			t.Fatalf("%s after release: %+v, %v", k, info, err)
		}
	}
	t.Logf("%d leases renewed across SCRIPT FLUSH (%d EVAL fallbacks), released after a second flush",
		len(leases), commandCalls(t, srv, "eval")-evalBefore)
}
