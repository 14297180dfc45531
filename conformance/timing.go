package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// This file holds the properties about time: that renewals keep a lease
// (RenewKeepsLease), that a renewal sets the lease to the TTL it returns,
// from when it was sent (RenewTTL), that an unrenewed lease ends within
// TTL + ExpirySlack and not before (ExpiryWithoutRenew), and that the send
// times a backend reports under latency never overstate a lease
// (SentIsSendTime). They judge timing by what they measured (when each
// request was sent and returned) rather than by fixed bounds, so that a
// loaded machine makes them inconclusive, never wrong: an inconclusive run
// is retried once with a longer TTL, and only a measured violation fails.
// SentIsSendTime itself is in senttime.go.

func testExpiry(t *testing.T, e *env) {
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive { return e.expiry(t, ttl) })
}

// expiry checks that an unrenewed lease of ttl lets another backend in
// within its TTL + ExpirySlack, never before its TTL. A run whose poller
// was descheduled across the moment the key became free decides nothing.
func (e *env) expiry(t *testing.T, requested time.Duration) *inconclusive {
	t.Helper()
	key := e.key("expiry")
	l := e.locker(t, func(o *fencedlock.Options) { o.TTL, o.ManualRenew = requested, true })
	sentA := time.Now()
	a := e.mustTryAcquire(t, l, key)
	// The lease starts between sentA and gotA: not over before sentA + TTL,
	// over by gotA + TTL + ExpirySlack.
	gotA := time.Now()
	b := e.backend(t)
	ttl := grantTTL(a.TTL(), requested)
	// The store's clock may run at a slightly different rate than ours.
	earliest := sentA.Add(ttl - ttl/100 - time.Millisecond)
	if !e.held(t, key) && time.Now().Before(earliest) {
		t.Fatalf("key free %v after TryAcquire, before its TTL of %v", time.Since(sentA).Round(time.Millisecond), ttl)
	}
	g, sent, got, gap := e.acquireByGap(t, b, key, gotA.Add(ttl+e.cfg.ExpirySlack), "unrenewed lease")
	if got.Before(earliest) {
		t.Fatalf("another backend took the key %v after the holder's request was sent, before its TTL of %v",
			got.Sub(sentA).Round(time.Millisecond), ttl)
	}
	defer b.Release(e.ctx, g)
	if maxGap := max(ttl/4, 4*e.pollInterval()); gap > maxGap {
		return &inconclusive{why: fmt.Sprintf("the poller's attempts were %v apart when the key became free", gap.Round(time.Millisecond)), late: gap - e.pollInterval()}
	}
	t.Logf("key taken by another backend %v after the holder's acquire (TTL %v, slack %v)",
		sent.Sub(sentA).Round(time.Millisecond), ttl, e.cfg.ExpirySlack)
	if g.Fence <= a.Fence() {
		t.Errorf("fence after expiry %v, want > %v", g.Fence, a.Fence())
	}
	if !e.waitDone(a.Done(), e.schedAllowance()) {
		t.Fatal("the expired holder's lease is not reported lost")
	}
	if !errors.Is(context.Cause(a.Context()), fencedlock.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", context.Cause(a.Context()))
	}
	return nil
}

// renewCall is one Renew call seen by a renewRecorder.
type renewCall struct {
	sent, returned time.Time
	ttl            time.Duration // as returned, or as requested if none
	err            error
}

// renewRecorder records the Renew calls a Locker's watchdog makes.
type renewRecorder struct {
	driver.Backend
	mu    sync.Mutex
	calls []renewCall
}

func (r *renewRecorder) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	sent := time.Now()
	d, err := r.Backend.Renew(ctx, g, ttl)
	r.mu.Lock()
	r.calls = append(r.calls, renewCall{sent: sent, returned: time.Now(), ttl: grantTTL(d, ttl), err: err})
	r.mu.Unlock()
	return d, err
}

func (r *renewRecorder) record() []renewCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]renewCall(nil), r.calls...)
}

// heldUntil returns until when the store must hold a key whose lease was
// set by the successful calls that returned before `before`: the latest
// send time plus returned TTL, less the allowance for the store's clock
// running at another rate than ours (1% and 1ms).
func heldUntil(calls []renewCall, before time.Time) time.Time {
	var until time.Time
	for _, c := range calls {
		if c.err != nil || c.returned.After(before) {
			continue
		}
		if u := c.sent.Add(c.ttl - c.ttl/100 - time.Millisecond); u.After(until) {
			until = u
		}
	}
	return until
}

// lateness returns how late the calls, meant to be sent every apart, were:
// the largest gap between consecutive sends (from start for the first)
// less every, or the longest call if that is longer (a renewal delayed in
// flight is as late as one sent late).
func lateness(start time.Time, calls []renewCall, every time.Duration) time.Duration {
	var late time.Duration
	prev := start
	for _, c := range calls {
		late = max(late, c.sent.Sub(prev)-every, c.returned.Sub(c.sent))
		prev = c.sent
	}
	return late
}

// inconclusive reports that a timing property could not decide in this
// run because the test itself was late: not a violation by the backend.
type inconclusive struct {
	why  string
	late time.Duration // how late the suite's own requests were
}

// retryTimed runs check with the lease ttl and, while it is inconclusive,
// up to twice more, each time with a lease long enough for the lateness
// just measured (8x it, and at least 3x the previous lease, at most
// MaxTTL): scheduling stalls on a loaded machine come in bursts, so the
// lease is sized from the latest one. A third inconclusive run fails: the
// machine is too loaded to check the property at all, which the failure
// says.
func (e *env) retryTimed(t *testing.T, ttl time.Duration, check func(ttl time.Duration) *inconclusive) {
	t.Helper()
	const retries = 2
	inc := check(ttl)
	for i := 0; inc != nil; i++ {
		if i == retries {
			t.Fatalf("inconclusive again with TTL %v: %s (%v late): the machine is too loaded to check this property; raise Config.MinTTL",
				ttl, inc.why, inc.late.Round(time.Millisecond))
		}
		longer := min(max(3*ttl, 8*inc.late).Round(time.Millisecond), fencedlock.MaxTTL)
		if span, left, ok := e.fits(longer); !ok {
			t.Fatalf("inconclusive with TTL %v: %s (%v late), and a run with TTL %v (about %v) does not fit in the %v left of the property's deadline (Config.Timeout): the machine is too loaded to check this property; raise Config.MinTTL or Config.Timeout",
				ttl, inc.why, inc.late.Round(time.Millisecond), longer, span.Round(time.Millisecond), left.Round(time.Millisecond))
		}
		t.Logf("inconclusive with TTL %v: %s (the suite's requests were %v late; scheduling lateness max %v); not a violation: retrying with TTL %v",
			ttl, inc.why, inc.late.Round(time.Millisecond), e.lag.Max().Round(time.Millisecond), longer)
		ttl = longer
		inc = check(ttl)
	}
}

// fits reports whether a timed check with a lease of ttl, which lasts
// about span (at most 4x the lease, the longest of them: watchdogKeeps,
// plus the expiry slack and the scheduling allowance twice), fits in the
// time left before the property's deadline. A retry that does not fit
// would end in the context's error, which reads as the backend's failure
// (TestBrokenBackendsAreReported saw "Acquire: context deadline exceeded"
// from RenewKeepsLease and RenewTTL at load average 20, after a retry).
func (e *env) fits(ttl time.Duration) (span, left time.Duration, ok bool) {
	span = 4*ttl + e.cfg.ExpirySlack + 2*e.schedAllowance()
	left = e.timeLeft()
	return span, left, span <= left
}

func testRenewKeepsLease(t *testing.T, e *env) {
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive { return e.watchdogKeeps(t, ttl) })
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive { return e.directRenewKeeps(t, ttl) })
}

// watchdogKeeps checks that a Locker's watchdog keeps a lease of ttl held
// past 3x ttl, and that no one else gets the key meanwhile.
func (e *env) watchdogKeeps(t *testing.T, ttl time.Duration) *inconclusive {
	t.Helper()
	key := e.key("renew")
	b := e.backend(t)
	var rec *renewRecorder
	if _, keeps := b.(driver.KeepAliver); !keeps {
		// A KeepAliver's renewals are its own; the Locker calls no Renew.
		rec = &renewRecorder{Backend: b}
		b = rec
	}
	l := mustLocker(t, b, e.lockerOpts(func(o *fencedlock.Options) { o.TTL = ttl }))
	t.Cleanup(func() { _ = l.Close() })
	opts := l.Options()
	sentA := time.Now()
	ls := e.mustTryAcquire(t, l, key)
	defer ls.Release(e.ctx)
	ttl = grantTTL(ls.TTL(), ttl)
	acquired := []renewCall{{sent: sentA, returned: time.Now(), ttl: ttl}}
	until := time.Now().Add(3*ttl + ttl/2 + e.cfg.ExpirySlack)
	checks := 0
	// late is the watchdog's lateness so far: that of the renewals it
	// sent, and that of the one it should have sent by now.
	late := func(now time.Time) time.Duration {
		if rec == nil {
			return e.lag.Max()
		}
		calls := rec.record()
		last := sentA
		if len(calls) > 0 {
			last = calls[len(calls)-1].sent
		}
		return max(lateness(sentA, calls, opts.RenewInterval), now.Sub(last)-opts.RenewInterval)
	}
	report := func() {
		if rec != nil {
			t.Logf("renewal lateness: max %v (%d renewals every %v)", late(time.Now()).Round(time.Millisecond), len(rec.record()), opts.RenewInterval)
		}
	}
	for time.Now().Before(until) {
		time.Sleep(ttl / 3)
		if err := ls.Err(); err != nil {
			report()
			return e.judgeLoss(t, err, rec, acquired, sentA, opts, checks)
		}
		dl := ls.Deadline()
		probeSent := time.Now()
		held := e.held(t, key)
		probeGot := time.Now()
		if !held {
			report()
			// The holder's local deadline lies at least the safety margin
			// before the store could let anyone else in.
			if limit := dl.Add(-ttl/100 - time.Millisecond); probeGot.Before(limit) {
				t.Fatalf("key free after %d checks, %v before the holder's local deadline: the renewals the backend confirmed did not keep the lease",
					checks, limit.Sub(probeGot).Round(time.Millisecond))
			}
			return &inconclusive{why: fmt.Sprintf("key free after %d checks, after the holder's local deadline (renewals late)", checks), late: max(probeSent.Sub(dl), late(probeSent))}
		}
		checks++
	}
	report()
	if err := ls.Release(e.ctx); err != nil {
		if lost := ls.Err(); lost != nil {
			// Lost after the last check (a loaded machine ran the
			// watchdog late): judged as a loss seen in the loop is.
			return e.judgeLoss(t, lost, rec, acquired, sentA, opts, checks)
		}
		t.Fatalf("Release after renewals: %v", err)
	}
	if e.held(t, key) {
		t.Fatal("key held after Release")
	}
	return nil
}

// judgeLoss decides whether a lease the watchdog lost (err) was lost
// because the backend failed or because the renewals were late.
func (e *env) judgeLoss(t *testing.T, err error, rec *renewRecorder, acquired []renewCall, sentA time.Time, opts fencedlock.Options, checks int) *inconclusive {
	t.Helper()
	if rec == nil {
		// A KeepAliver: its renewals cannot be seen. A loss is the
		// backend's unless the machine was slow enough to explain it.
		if lag := e.lag.Max(); lag < opts.TTL-opts.SafetyMargin-opts.RenewInterval {
			t.Fatalf("lease lost after %d checks although kept alive (scheduling lateness max %v): %v", checks, lag, err)
		}
		return &inconclusive{why: fmt.Sprintf("lease lost after %d checks: %v", checks, err), late: e.lag.Max()}
	}
	calls := rec.record()
	late := lateness(sentA, calls, opts.RenewInterval)
	all := append(acquired, calls...)
	for i, c := range calls {
		switch {
		case c.err == nil:
		case errors.Is(c.err, fencedlock.ErrNotHeld):
			if until := heldUntil(all, c.sent); c.returned.Before(until) {
				t.Fatalf("lease lost after %d checks: renewal %d reported ErrNotHeld %v before the lease confirmed by the previous request ran out: %v",
					checks, i+1, until.Sub(c.returned).Round(time.Millisecond), c.err)
			}
			return &inconclusive{why: fmt.Sprintf("renewal %d found the lease expired", i+1), late: late}
		case errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, context.Canceled):
			// A renewal still in flight at the local deadline.
		default:
			t.Fatalf("lease lost after %d checks: renewal %d of a held key failed: %v", checks, i+1, c.err)
		}
	}
	return &inconclusive{why: fmt.Sprintf("lease lost after %d checks (%v)", checks, err), late: late}
}

// directRenewKeeps checks that Backend.Renew, called every ttl/3, keeps a
// lease of ttl held past its TTL.
func (e *env) directRenewKeeps(t *testing.T, ttl time.Duration) *inconclusive {
	t.Helper()
	key := e.key("renew-direct")
	b := e.backend(t)
	sentA := time.Now()
	g := e.grabTTL(t, b, key, ttl)
	defer b.Release(e.ctx, g)
	calls := []renewCall{{sent: sentA, returned: time.Now(), ttl: grantTTL(g.TTL, ttl)}}
	until := time.Now().Add(grantTTL(g.TTL, ttl) + ttl/2 + e.cfg.ExpirySlack)
	for time.Now().Before(until) {
		time.Sleep(ttl / 3)
		c := renewCall{sent: time.Now()}
		d, err := b.Renew(e.ctx, g, ttl)
		c.returned, c.ttl, c.err = time.Now(), grantTTL(d, ttl), err
		if errors.Is(err, fencedlock.ErrNotHeld) {
			if limit := heldUntil(calls, c.sent); c.returned.Before(limit) {
				t.Fatalf("Backend.Renew of a held key reported ErrNotHeld %v before the lease it last confirmed ran out: %v",
					limit.Sub(c.returned).Round(time.Millisecond), err)
			}
			return &inconclusive{why: "a direct renewal found the lease expired", late: lateness(sentA, calls[1:], ttl/3)}
		}
		if err != nil {
			t.Fatalf("Backend.Renew of a held key: %v", err)
		}
		if d != 0 && d < ttl {
			t.Fatalf("Backend.Renew applied %v, less than the requested %v", d, ttl)
		}
		calls = append(calls, c)
	}
	probeSent := time.Now()
	held := e.held(t, key)
	if !held {
		if limit := heldUntil(calls, probeSent); time.Now().Before(limit) {
			t.Fatalf("key free after direct renewals, %v before the lease the last one confirmed ran out", time.Until(limit).Round(time.Millisecond))
		}
		return &inconclusive{why: "key free after direct renewals that came late", late: lateness(sentA, calls[1:], ttl/3)}
	}
	t.Logf("renewal lateness (direct): max %v (%d renewals every %v)", lateness(sentA, calls[1:], ttl/3).Round(time.Millisecond), len(calls)-1, ttl/3)
	return nil
}

func testRenewTTL(t *testing.T, e *env) {
	e.retryTimed(t, e.ttl, func(ttl time.Duration) *inconclusive {
		type result struct {
			msg  string
			inc  *inconclusive
			note string
		}
		scenarios := []struct {
			name     string
			renewals int
			gap      time.Duration
		}{{"one renewal halfway", 1, ttl / 2}, {"three renewals in a row", 3, 0}}
		results := make([]result, len(scenarios))
		keys := []string{e.key("renew-once"), e.key("renew-thrice")}
		bs := []driver.Backend{e.backend(t), e.backend(t)}
		others := []driver.Backend{e.backend(t), e.backend(t)}
		var wg sync.WaitGroup
		for i, sc := range scenarios {
			wg.Go(func() {
				msg, inc, note := e.renewThenCrash(bs[i], others[i], keys[i], ttl, sc.renewals, sc.gap)
				if msg != "" {
					msg = sc.name + ": " + msg
				}
				results[i] = result{msg, inc, sc.name + ": " + note}
			})
		}
		wg.Wait()
		var inc *inconclusive
		for _, r := range results {
			if r.msg != "" {
				t.Error(r.msg)
				continue
			}
			if r.inc != nil {
				inc = r.inc
				continue
			}
			t.Log(r.note)
		}
		if t.Failed() {
			t.FailNow()
		}
		return inc
	})
}

// renewThenCrash acquires key with a lease of ttl, renews it n times (the
// first after gap) and then stops, as a crashed holder would. The key must
// stay held until the last renewal's send time plus the TTL it returned,
// and be free for another backend within ExpirySlack after that (after the
// renewal returned). It returns a violation, or why the run was
// inconclusive, or a note for the log. It must not call t's methods (it
// runs on its own goroutine).
func (e *env) renewThenCrash(b, other driver.Backend, key string, ttl time.Duration, n int, gap time.Duration) (violation string, _ *inconclusive, note string) {
	sentA := time.Now()
	g, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: ttl})
	if err != nil {
		return fmt.Sprintf("Acquire of a free key: %v", err), nil, ""
	}
	calls := []renewCall{{sent: sentA, returned: time.Now(), ttl: grantTTL(g.TTL, ttl)}}
	time.Sleep(gap)
	for i := range n {
		c := renewCall{sent: time.Now()}
		d, err := b.Renew(e.ctx, g, ttl)
		c.returned, c.ttl, c.err = time.Now(), grantTTL(d, ttl), err
		if err != nil {
			if errors.Is(err, fencedlock.ErrNotHeld) && !c.returned.Before(heldUntil(calls, c.sent)) {
				return "", &inconclusive{why: fmt.Sprintf("renewal %d came after the lease ran out", i+1), late: max(c.sent.Sub(calls[len(calls)-1].sent)-gap, c.returned.Sub(c.sent))}, ""
			}
			return fmt.Sprintf("Renew %d of a held key: %v", i+1, err), nil, ""
		}
		calls = append(calls, c)
	}
	last := calls[len(calls)-1]
	earliest := last.sent.Add(last.ttl - last.ttl/100 - time.Millisecond)
	notAfter := last.returned.Add(last.ttl + e.cfg.ExpirySlack)
	interval := max(e.ttl/25, 2*time.Millisecond)
	// The poller must look often enough to see the key free too early or
	// held too late: a success after a gap longer than maxGap since the
	// previous attempt (the poller was descheduled) decides nothing.
	maxGap := max(ttl/4, 4*interval)
	prev := last.returned
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		g2, err := other.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		got := time.Now()
		if err == nil {
			_ = other.Release(e.ctx, g2)
			if got.Before(earliest) {
				return fmt.Sprintf("another backend took the key %v after the last renewal was sent, before the %v it returned: Renew's TTL is not the lease applied from when it was sent",
					got.Sub(last.sent).Round(time.Millisecond), last.ttl), nil, ""
			}
			if gap := sent.Sub(prev); gap > maxGap {
				return "", &inconclusive{why: fmt.Sprintf("the poller's attempts were %v apart when the key became free", gap.Round(time.Millisecond)), late: gap - interval}, ""
			}
			return "", nil, fmt.Sprintf("after %d renewal(s) returning %v, the key was free %v after the last one was sent", n, last.ttl, sent.Sub(last.sent).Round(time.Millisecond))
		}
		prev = sent
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			return fmt.Sprintf("Acquire: %v", err), nil, ""
		}
		if sent.After(notAfter) {
			return fmt.Sprintf("key still held %v after the last renewal was sent, which returned a TTL of %v (slack %v): Renew extends the lease by ttl, or longer than it says, instead of setting it to ttl from now",
				sent.Sub(last.sent).Round(time.Millisecond), last.ttl, e.cfg.ExpirySlack), nil, ""
		}
		if e.ctx.Err() != nil {
			return e.ctx.Err().Error(), nil, ""
		}
		time.Sleep(interval)
	}
}
