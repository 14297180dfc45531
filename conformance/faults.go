package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// FaultInjector is implemented by harnesses that can make the way between
// one backend and the store fail. The StoreFaults property uses it to check
// what a backend reports when its store cannot be reached, answers late,
// or applies a request whose reply is then lost (see the driver contract:
// such errors are transient, and an outcome the store may have applied is
// never reported as "held by another" or "not held"). A harness over a
// network store puts a proxy or a wrapped net.Conn between the backend's
// client and the server (the Redis and etcd harnesses use a TCP proxy); an
// in-process store wraps the calls into it.
type FaultInjector interface {
	// NewFaultyBackend is NewBackend for a backend whose requests to the
	// store pass through the returned Faults, healthy until told otherwise.
	NewFaultyBackend(ctx context.Context) (driver.Backend, Faults, error)
}

// Faults controls the faults between one backend and the store. Its
// methods take effect for the requests sent after they return.
type Faults interface {
	// Refuse, while on, makes every request fail before it reaches the
	// store, as a refused or reset connection does: nothing is applied.
	Refuse(on bool)
	// DelayReplies delays every reply by d: requests reach the store and
	// are applied on time, their replies arrive d late. Zero ends it.
	DelayReplies(d time.Duration)
	// DropReplies makes the next n replies of the store to the backend get
	// lost after the store applied their requests (the connection is reset
	// before they arrive). A harness on a real connection may drop the
	// reply to the client's own handshake instead: StoreFaults checks an
	// error against either outcome.
	DropReplies(n int)
}

// Corrupter is implemented by harnesses that can put on the store, in
// place of key's lock, a value the backend never writes (a value of
// another type, a record of another format). The ForeignValue property
// uses it to check that the backend reports such a key with an error
// wrapping [driver.ErrPermanent] (no retry fixes it until an operator
// acts), not as held or free, and changes nothing.
type Corrupter interface {
	// Corrupt replaces whatever is stored for key's lock with a value the
	// backend never writes, without a TTL.
	Corrupt(ctx context.Context, key string) error
}

// isCtxErr reports whether err wraps a context's error.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// wantTransient fails t unless err, the error of a call whose request met
// a fault (what), is an error that is neither ErrPermanent nor, without the
// context's error, ErrNotAcquired or ErrNotHeld: the store may have applied
// it, and a retry may succeed.
func wantTransient(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: nil, want an error", what)
	case errors.Is(err, driver.ErrPermanent):
		t.Fatalf("%s: %v: ErrPermanent for a fault of the connection, which a retry can overcome (the Locker would give up at once)", what, err)
	case isCtxErr(err):
	case errors.Is(err, driver.ErrNotAcquired):
		t.Fatalf("%s: %v: ErrNotAcquired (\"held by another\") for a request the store may have applied", what, err)
	case errors.Is(err, driver.ErrNotHeld):
		t.Fatalf("%s: %v: ErrNotHeld for a request the store may have applied", what, err)
	}
}

// healed retries call (a request by a backend whose faults just ended)
// while it fails with a transient error, for at most 2s and the
// scheduling allowance: a client may take a moment to reconnect.
func (e *env) healed(call func() error) error {
	end := time.Now().Add(2*time.Second + e.schedAllowance())
	for {
		err := call()
		if err == nil || errors.Is(err, driver.ErrNotHeld) || errors.Is(err, driver.ErrNotAcquired) ||
			errors.Is(err, driver.ErrPermanent) || time.Now().After(end) || e.ctx.Err() != nil {
			return err
		}
		time.Sleep(e.pollInterval())
	}
}

func testStoreFaults(t *testing.T, e *env) {
	fi, ok := harnessIs[FaultInjector](t, e)
	if !ok {
		return
	}
	b, f, err := fi.NewFaultyBackend(e.ctx)
	if err != nil {
		t.Fatalf("harness NewFaultyBackend: %v", err)
	}
	if b == nil || f == nil {
		t.Fatal("harness NewFaultyBackend returned a nil backend or Faults")
	}
	t.Cleanup(func() { _ = b.Close() })
	r := &faultRun{t: t, e: e, b: b, f: f, probe: e.backend(t), bound: e.schedAllowance() + e.ttl}
	r.refused()
	r.lostAcquire()
	r.lostRenewRelease()
	r.lateReplies()
	t.Logf("refused, lost and late replies reported as transient errors or the context's; the store's state after each is the request's:\n\t%s", strings.Join(r.seen, "\n\t"))
}

// faultRun is one run of StoreFaults: a backend b behind the faults f, and
// a healthy backend probe that reads the store's state after each fault.
type faultRun struct {
	t     *testing.T
	e     *env
	b     driver.Backend
	f     Faults
	probe driver.Backend
	seen  []string      // what the backend reported, for the log
	bound time.Duration // a call meeting a fault returns within it
}

func (r *faultRun) saw(what string, err error) {
	r.seen = append(r.seen, fmt.Sprintf("%s: %v", what, err))
}

func (r *faultRun) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.e.ctx, r.bound)
}

// release is the owner's clean-up once the faults ended: it must leave the
// key free whatever the faulty call did.
func (r *faultRun) release(what string, g driver.Grant) {
	r.t.Helper()
	if err := r.e.healed(func() error { return r.b.Release(r.e.ctx, g) }); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		r.t.Fatalf("%s: the owner's Release once the faults ended: %v", what, err)
	}
	if r.e.heldOn(r.t, r.probe, g.Key) {
		r.t.Fatalf("%s: %s held after its owner's Release", what, quote(g.Key))
	}
}

// grabHealed is grab on the faulty backend once the faults ended, on a
// key named after name. The connection an earlier fault reset may still
// fail an Acquire with a transient error (a write on the reset connection,
// seen on rueidis after a cut reply): that is allowed, so the Acquire is
// tried again, on a fresh key (the failed one may have been applied), for
// as long as healed tries.
func (r *faultRun) grabHealed(name string) driver.Grant {
	r.t.Helper()
	var req driver.AcquireRequest
	var g driver.Grant
	err := r.e.healed(func() error {
		req = driver.AcquireRequest{Key: r.e.key(name), Owner: owner(), TTL: r.e.hold}
		var err error
		g, err = r.b.Acquire(r.e.ctx, req)
		return err
	})
	if err != nil {
		r.t.Fatalf("Acquire(%s) of a free key once the faults ended: %v", quote(req.Key), err)
	}
	r.e.checkGrant(r.t, g, req.Key, req.TTL)
	return g
}

// renewHealed fails the test unless g's owner can renew once the faults
// ended.
func (r *faultRun) renewHealed(after string, g driver.Grant) {
	r.t.Helper()
	if err := r.e.healed(func() error { return errOf(r.b.Renew(r.e.ctx, g, r.e.hold)) }); err != nil {
		r.t.Fatalf("the holder's Renew %s: %v", after, err)
	}
}

// refused: nothing reaches the store. Transient errors, and nothing
// changed: a free key stays free, a held key stays held and renewable.
// A refused Release comes last: the holder asked to end its lease, and a
// backend may then end its own side of it (etcd revokes the grant's lease
// in the background once the store answers again, which frees the key at
// once instead of after its TTL, and deletes nothing else: the lease
// carries only that key); so afterwards the key may be the holder's or
// free, and the owner's Release leaves it free.
func (r *faultRun) refused() {
	t, e, b := r.t, r.e, r.b
	held := e.grab(t, b, e.key("refused-held"))
	free := e.key("refused-free")
	r.f.Refuse(true)
	ctx, cancel := r.callCtx()
	_, err := b.Acquire(ctx, driver.AcquireRequest{Key: free, Owner: owner(), TTL: e.hold})
	wantTransient(t, "Acquire refused by the connection", err)
	r.saw("refused Acquire", err)
	_, err = b.Renew(ctx, held, e.hold)
	wantTransient(t, "Renew refused by the connection", err)
	r.saw("refused Renew", err)
	cancel()
	r.f.Refuse(false)
	if e.heldOn(t, r.probe, free) {
		t.Fatalf("%s held after an Acquire that never reached the store", quote(free))
	}
	if !e.heldOn(t, r.probe, held.Key) {
		t.Fatalf("%s free after a Renew that never reached the store", quote(held.Key))
	}
	r.renewHealed("once the connection works again", held)
	r.f.Refuse(true)
	ctx, cancel = r.callCtx()
	err = b.Release(ctx, held)
	cancel()
	r.f.Refuse(false)
	wantTransient(t, "Release refused by the connection", err)
	r.saw("refused Release", err)
	r.release("after refused requests", held)
}

// dropNext arms the loss of the next reply on a connection that has just
// carried a request (warm), and returns the context of the call to make.
// Applied, the reply lost: the outcome is unknown to the backend, so no
// "held by another" nor "not held"; the store's state is the request's.
// (A harness on a real connection cannot always tell which reply it drops:
// the client's own handshake may be the one lost, and the request not
// sent. So an error is checked only against either outcome; a success must
// be the request's.)
func (r *faultRun) dropNext() (context.Context, context.CancelFunc) {
	r.t.Helper()
	err := r.e.healed(func() error { return r.b.Release(r.e.ctx, driver.Grant{Key: r.e.key("warm"), Owner: owner()}) })
	if !errors.Is(err, driver.ErrNotHeld) {
		r.t.Fatalf("Release of a never-held key once the faults ended: %v, want ErrNotHeld", err)
	}
	r.f.DropReplies(1)
	return r.callCtx()
}

// lostAcquire: an Acquire applied, its reply lost, is a grant or a
// transient error, and the Locker's clean-up after an unknown outcome
// frees the key.
func (r *faultRun) lostAcquire() {
	t, e := r.t, r.e
	req := driver.AcquireRequest{Key: e.key("lost-acquire"), Owner: owner(), TTL: e.hold}
	ctx, cancel := r.dropNext()
	g, err := r.b.Acquire(ctx, req)
	cancel()
	r.saw("Acquire, reply lost", err)
	if err == nil {
		e.checkGrant(t, g, req.Key, req.TTL)
		if !e.heldOn(t, r.probe, req.Key) {
			t.Fatalf("%s free after an Acquire granted (a reply lost on the way)", quote(req.Key))
		}
	} else {
		wantTransient(t, "Acquire whose reply was lost", err)
	}
	r.release("after an Acquire whose reply was lost", driver.Grant{Key: req.Key, Owner: req.Owner})
}

// lostRenewRelease: a Renew, then a Release, applied with their replies
// lost, report success or a transient error, and the key is held after
// the Renew, free after a Release that returned nil.
func (r *faultRun) lostRenewRelease() {
	t, e := r.t, r.e
	g := r.grabHealed("lost-renew")
	ctx, cancel := r.dropNext()
	_, err := r.b.Renew(ctx, g, e.hold)
	cancel()
	r.saw("Renew, reply lost", err)
	if err != nil {
		wantTransient(t, "Renew whose reply was lost", err)
	}
	if !e.heldOn(t, r.probe, g.Key) {
		t.Fatalf("%s free after its owner's Renew whose reply was lost", quote(g.Key))
	}
	r.renewHealed("after one whose reply was lost", g)

	ctx, cancel = r.dropNext()
	err = r.b.Release(ctx, g)
	cancel()
	r.saw("Release, reply lost", err)
	if err != nil {
		wantTransient(t, "Release whose reply was lost", err)
	} else if e.heldOn(t, r.probe, g.Key) {
		t.Fatalf("%s held after its owner's Release returned nil (a reply lost on the way)", quote(g.Key))
	}
	r.release("after a Release whose reply was lost", g)
}

// lateReplies: a call whose context ends before its reply arrives returns
// promptly with the context's error or a transient one; the owner's
// clean-up then frees the key whatever the outcome.
func (r *faultRun) lateReplies() {
	e := r.e
	short := e.ttl / 2
	g := r.grabHealed("late-renew")
	var acquired []driver.Grant // one key per attempt: an Acquire may have been applied
	for _, c := range []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error {
			req := driver.AcquireRequest{Key: e.key("late-acquire"), Owner: owner(), TTL: e.hold}
			acquired = append(acquired, driver.Grant{Key: req.Key, Owner: req.Owner})
			return errOf(r.b.Acquire(ctx, req))
		}},
		{"Renew", func(ctx context.Context) error { return errOf(r.b.Renew(ctx, g, e.hold)) }},
	} {
		for attempt := 1; !r.lateReply(c.what, c.call, short); attempt++ {
			if attempt == maxLateAttempts {
				r.t.Fatalf("%s: %d attempts in which the suite was scheduled later than the reply's delay: the machine is too loaded to judge", c.what, attempt)
			}
		}
	}
	r.f.DelayReplies(0)
	for _, a := range acquired {
		r.release("after an Acquire whose reply came late", a)
	}
	r.renewHealed("after one whose reply came late", g)
	r.release("after a Renew whose reply came late", g)
}

// maxLateAttempts bounds the attempts of a call of lateReplies that a
// loaded machine left unjudged.
const maxLateAttempts = 3

// lateReply makes call with a context of short while every reply is
// delayed by short plus twice the scheduling allowance, and checks that
// it returns promptly with the context's error or a transient one. It
// reports false, judging nothing, when the suite was scheduled at least
// the delay late meanwhile (the reply and the context's end were then due
// together: a memory conformance run at load average 15 was held up
// 1.364s and its Renew, replied 1.125s late, returned nil); the next
// attempt's delay is widened by that lateness.
func (r *faultRun) lateReply(what string, call func(context.Context) error, short time.Duration) bool {
	t, e := r.t, r.e
	delay := short + 2*e.schedAllowance()
	r.f.DelayReplies(delay)
	e.lag.StartWindow()
	ctx, cancel := context.WithTimeout(e.ctx, short)
	start := time.Now()
	stacks := stacksAfter(short + e.schedAllowance())
	err := call(ctx)
	took := time.Since(start)
	dump := stacks()
	cancel()
	r.saw(what+", reply late", err)
	if err == nil {
		if late := e.lag.Window(); late >= delay-short {
			t.Logf("%s whose reply is %v late, with a context of %v: nil while the suite was %v late: not judged, trying again", what, delay, short, late.Round(time.Millisecond))
			return false
		}
		t.Fatalf("%s whose reply is %v late, with a context of %v: nil, want the context's error", what, delay, short)
	}
	if !isCtxErr(err) {
		wantTransient(t, what+" whose reply came after its context ended", err)
	}
	if limit := short + e.schedAllowance(); took > limit && took > short+e.settledAllowance() {
		t.Fatalf("%s with a context of %v, its reply %v late, returned after %v: a backend must return promptly once its context is done; the goroutines when it was due:\n%s", what, short, delay, took.Round(time.Millisecond), dump)
	}
	return true
}

func testForeignValue(t *testing.T, e *env) {
	checkNoExpiry(t, e)
	c, ok := harnessIs[Corrupter](t, e)
	if !ok {
		return
	}
	b := e.backend(t)
	corrupt := func(key string) {
		t.Helper()
		if err := c.Corrupt(e.ctx, key); err != nil {
			t.Fatalf("harness Corrupt: %v", err)
		}
	}
	wantPermanent := func(what string, err error, orNotHeld bool) {
		t.Helper()
		if errors.Is(err, driver.ErrPermanent) || (orNotHeld && errors.Is(err, driver.ErrNotHeld)) {
			return
		}
		t.Fatalf("%s: %v, want an error wrapping ErrPermanent (no retry helps until an operator acts)", what, err)
	}

	// A never-held key holding a foreign value: Acquire must neither take
	// it nor report it held by another.
	key := e.key("foreign")
	corrupt(key)
	for i := range 2 {
		_, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		if errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("Acquire %d of a key holding a foreign value: %v: reported held by another, which the Locker would wait for forever", i+1, err)
		}
		wantPermanent("Acquire of a key holding a foreign value", err, false)
	}

	// A held key overwritten with a foreign value: its owner's Renew and
	// Release fail, and change nothing (the value stays: Acquire still
	// reports it).
	key = e.key("foreign-held")
	g := e.grab(t, b, key)
	corrupt(key)
	_, err := b.Renew(e.ctx, g, e.hold)
	wantPermanent("Renew of a held key overwritten with a foreign value", err, true)
	err = b.Release(e.ctx, g)
	wantPermanent("Release of a held key overwritten with a foreign value", err, true)
	_, err = b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
	wantPermanent("Acquire of the foreign value after its owner's Renew and Release (they must change nothing)", err, false)
	t.Logf("a foreign value under a lock is reported with ErrPermanent and left as it is")
}

// stacksAfter takes a dump of every goroutine's stack once d has passed,
// unless the returned function is called first; that function stops the
// timer and returns the dump (empty if none was taken yet), at most 64 KiB.
// A call that should have returned by then shows where it waits (seen
// once at load average 20: a Renew back 1.156s after its 125ms context).
func stacksAfter(d time.Duration) func() string {
	var mu sync.Mutex
	var dump []byte
	tm := time.AfterFunc(d, func() {
		buf := make([]byte, 64<<10)
		n := runtime.Stack(buf, true)
		mu.Lock()
		dump = buf[:n]
		mu.Unlock()
	})
	return func() string {
		tm.Stop()
		mu.Lock()
		defer mu.Unlock()
		return string(dump)
	}
}
