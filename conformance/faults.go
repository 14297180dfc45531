package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// client and the server (the Redis harnesses use a TCP proxy); an
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
	fi, ok := e.h.(FaultInjector)
	if !ok {
		t.Logf("%T is not a FaultInjector: nothing to check", e.h)
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
	probe := e.backend(t)
	var seen []string // what the backend reported, for the log
	saw := func(what string, err error) { seen = append(seen, fmt.Sprintf("%s: %v", what, err)) }
	bound := e.schedAllowance() + e.ttl // a call meeting a fault returns within it
	callCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(e.ctx, bound) }
	release := func(what string, g driver.Grant) {
		t.Helper()
		if err := e.healed(func() error { return b.Release(e.ctx, g) }); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("%s: the owner's Release once the faults ended: %v", what, err)
		}
		if e.heldOn(t, probe, g.Key) {
			t.Fatalf("%s: %s held after its owner's Release", what, quote(g.Key))
		}
	}

	// Refused: nothing reaches the store. Transient errors, and nothing
	// changed: a free key stays free, a held key stays held.
	held := e.grab(t, b, e.key("refused-held"))
	free := e.key("refused-free")
	f.Refuse(true)
	ctx, cancel := callCtx()
	_, err = b.Acquire(ctx, driver.AcquireRequest{Key: free, Owner: owner(), TTL: e.hold})
	wantTransient(t, "Acquire refused by the connection", err)
	saw("refused Acquire", err)
	_, err = b.Renew(ctx, held, e.hold)
	wantTransient(t, "Renew refused by the connection", err)
	saw("refused Renew", err)
	err = b.Release(ctx, held)
	wantTransient(t, "Release refused by the connection", err)
	saw("refused Release", err)
	cancel()
	f.Refuse(false)
	if e.heldOn(t, probe, free) {
		t.Fatalf("%s held after an Acquire that never reached the store", quote(free))
	}
	if !e.heldOn(t, probe, held.Key) {
		t.Fatalf("%s free after a Release that never reached the store", quote(held.Key))
	}
	if err := e.healed(func() error { return errOf(b.Renew(e.ctx, held, e.hold)) }); err != nil {
		t.Fatalf("the holder's Renew once the connection works again: %v", err)
	}
	release("after refused requests", held)

	// Applied, the reply lost: the outcome is unknown to the backend, so
	// no "held by another" nor "not held"; the store's state is the
	// request's. (A harness on a real connection cannot always tell which
	// reply it drops: the client's own handshake may be the one lost, and
	// the request not sent. So an error is checked only against either
	// outcome; a success must be the request's.) Each fault is armed on a
	// connection that has just carried a request: warm.
	warm := func() {
		t.Helper()
		err := e.healed(func() error { return b.Release(e.ctx, driver.Grant{Key: e.key("warm"), Owner: owner()}) })
		if !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Release of a never-held key once the faults ended: %v, want ErrNotHeld", err)
		}
	}
	req := driver.AcquireRequest{Key: e.key("lost-acquire"), Owner: owner(), TTL: e.hold}
	warm()
	f.DropReplies(1)
	ctx, cancel = callCtx()
	g, err := b.Acquire(ctx, req)
	cancel()
	saw("Acquire, reply lost", err)
	if err == nil {
		e.checkGrant(t, g, req.Key, req.TTL)
		if !e.heldOn(t, probe, req.Key) {
			t.Fatalf("%s free after an Acquire granted (a reply lost on the way)", quote(req.Key))
		}
	} else {
		wantTransient(t, "Acquire whose reply was lost", err)
	}
	// The Locker's clean-up after an unknown outcome frees it.
	release("after an Acquire whose reply was lost", driver.Grant{Key: req.Key, Owner: req.Owner})

	g = e.grab(t, b, e.key("lost-renew"))
	warm()
	f.DropReplies(1)
	ctx, cancel = callCtx()
	_, err = b.Renew(ctx, g, e.hold)
	cancel()
	saw("Renew, reply lost", err)
	if err != nil {
		wantTransient(t, "Renew whose reply was lost", err)
	}
	if !e.heldOn(t, probe, g.Key) {
		t.Fatalf("%s free after its owner's Renew whose reply was lost", quote(g.Key))
	}
	if err := e.healed(func() error { return errOf(b.Renew(e.ctx, g, e.hold)) }); err != nil {
		t.Fatalf("the holder's Renew after one whose reply was lost: %v", err)
	}

	warm()
	f.DropReplies(1)
	ctx, cancel = callCtx()
	err = b.Release(ctx, g)
	cancel()
	saw("Release, reply lost", err)
	if err != nil {
		wantTransient(t, "Release whose reply was lost", err)
	} else if e.heldOn(t, probe, g.Key) {
		t.Fatalf("%s held after its owner's Release returned nil (a reply lost on the way)", quote(g.Key))
	}
	release("after a Release whose reply was lost", g)

	// Late replies: a call whose context ends before its reply arrives
	// returns promptly with the context's error or a transient one; the
	// owner's clean-up then frees the key whatever the outcome.
	short := e.ttl / 2
	delay := short + 2*e.schedAllowance()
	g = e.grab(t, b, e.key("late-renew"))
	f.DelayReplies(delay)
	late := e.key("late-acquire")
	req = driver.AcquireRequest{Key: late, Owner: owner(), TTL: e.hold}
	for _, c := range []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"Acquire", func(ctx context.Context) error { return errOf(b.Acquire(ctx, req)) }},
		{"Renew", func(ctx context.Context) error { return errOf(b.Renew(ctx, g, e.hold)) }},
	} {
		ctx, cancel := context.WithTimeout(e.ctx, short)
		start := time.Now()
		err := c.call(ctx)
		took := time.Since(start)
		cancel()
		saw(c.what+", reply late", err)
		if err == nil {
			t.Fatalf("%s whose reply is %v late, with a context of %v: nil, want the context's error", c.what, delay, short)
		}
		if !isCtxErr(err) {
			wantTransient(t, c.what+" whose reply came after its context ended", err)
		}
		if limit := short + e.schedAllowance(); took > limit {
			t.Fatalf("%s with a context of %v, its reply %v late, returned after %v: a backend must return promptly once its context is done", c.what, short, delay, took.Round(time.Millisecond))
		}
	}
	f.DelayReplies(0)
	release("after an Acquire whose reply came late", driver.Grant{Key: late, Owner: req.Owner})
	if err := e.healed(func() error { return errOf(b.Renew(e.ctx, g, e.hold)) }); err != nil {
		t.Fatalf("the holder's Renew after one whose reply came late: %v", err)
	}
	release("after a Renew whose reply came late", g)
	t.Logf("refused, lost and late replies reported as transient errors or the context's; the store's state after each is the request's:\n\t%s", strings.Join(seen, "\n\t"))
}

func testForeignValue(t *testing.T, e *env) {
	c, ok := e.h.(Corrupter)
	if !ok {
		t.Logf("%T is not a Corrupter: nothing to check", e.h)
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
