package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/schedlag"
)

// Defaults used for the zero fields of [Config].
const (
	// DefaultMinTTL is Config.MinTTL when it is zero: the lease of the
	// renewal and expiry properties. (Not fencedlock.DefaultTTL, the
	// Locker's default lease.)
	DefaultMinTTL = 250 * time.Millisecond
	// DefaultExpirySlack is used when Config.ExpirySlack is zero.
	DefaultExpirySlack = 100 * time.Millisecond
	// DefaultQueueDelay is used when Config.QueueDelay is zero.
	DefaultQueueDelay = 100 * time.Millisecond
	// DefaultTimeout is the least per-case deadline (see Config.Timeout).
	DefaultTimeout = 30 * time.Second
)

// Harness gives the suite access to one shared store. [Run] makes a fresh
// Harness for every property it checks.
type Harness interface {
	// NewBackend returns a new backend over the harness's store, independent
	// of every other backend it returned, as if it ran in another process:
	// its own connections, sessions and caches. The suite closes it.
	NewBackend(ctx context.Context) (driver.Backend, error)

	// Invalidate deletes or revokes key's lock on the store behind its
	// holder's back, as an operator, an eviction or a failover would. It
	// must go through the store (not through a backend's local state), must
	// not reset the key's fence history, and must leave the key free. It is
	// called only on held keys.
	Invalidate(ctx context.Context, key string) error

	// Config describes the backend's limits to the suite.
	Config() Config
}

// Config describes a backend's timing to the suite. Its zero value suits a
// store with millisecond expiry on the local machine.
type Config struct {
	// MinTTL is the shortest lease the backend enforces precisely. The
	// properties about renewal and expiry request leases of this length;
	// the others request 20*MinTTL, so that no lease runs out in the middle
	// of a check on a slow machine. Zero means DefaultMinTTL. Backends with
	// coarse expiry set it higher (etcd leases are whole seconds with a
	// server minimum, so 2s there). It must be at least fencedlock.MinTTL.
	MinTTL time.Duration

	// ExpirySlack is how long after a lease's TTL has run out the store may
	// still report the key held (lazy or periodic expiry, rounding). The
	// suite requires that another backend can take an unrenewed key once
	// TTL + ExpirySlack has passed since the holder's request returned (the
	// store granted it no later; a request delayed on its way, as on a
	// loaded machine, starts its lease late without any fault of the store).
	// Zero means DefaultExpirySlack.
	ExpirySlack time.Duration

	// QueueDelay is, for backends implementing [driver.WaitAcquirer],
	// the time within which a waiter that called AcquireWait is queued on
	// the server. The FIFO check starts waiters this far apart (and, if the
	// order is wrong, once more 4x as far apart). Zero means
	// DefaultQueueDelay.
	QueueDelay time.Duration

	// QueuePlaceTTL is, for backends implementing [driver.WaitAcquirer],
	// how long the backend may keep the place of a queued waiter whose
	// requests stopped reaching the store (its process paused, its
	// connection cut) when that is longer than the lease the waiter asked
	// for: a waiter asking a lease of TTL keeps its place at most
	// max(TTL, QueuePlaceTTL) + ExpirySlack after its last request reached
	// the store, and the key then goes to the waiters behind it, never to
	// the silent one (SilentWaiter). Zero means the TTL alone (etcd: a
	// waiter's queue key lives on its lease); the fair queues of
	// backend/redis, backend/goredis and backend/postgres keep an entry at
	// least 2s, so that a waiter with a short lease survives a stall.
	QueuePlaceTTL time.Duration

	// Timeout is each property's deadline: the context passed to every call
	// expires then, and a property still running 10 seconds later panics
	// with every goroutine's stack rather than hang the test binary. Zero
	// means max(DefaultTimeout, 40*MinTTL).
	Timeout time.Duration
}

func (c Config) resolve() (Config, error) {
	if c.MinTTL == 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MinTTL < fencedlock.MinTTL || c.MinTTL > time.Minute {
		return c, fmt.Errorf("conformance: Config.MinTTL %v out of range [%v, 1m]", c.MinTTL, fencedlock.MinTTL)
	}
	if c.ExpirySlack == 0 {
		c.ExpirySlack = DefaultExpirySlack
	}
	if c.QueueDelay == 0 {
		c.QueueDelay = DefaultQueueDelay
	}
	if c.Timeout == 0 {
		c.Timeout = max(DefaultTimeout, 40*c.MinTTL)
	}
	if c.ExpirySlack < 0 || c.QueueDelay < 0 || c.QueuePlaceTTL < 0 || c.Timeout < 0 {
		return c, errors.New("conformance: negative duration in Config")
	}
	return c, nil
}

// Expirer is implemented by harnesses that can make a key's lease run out
// at once on the store (for instance PEXPIRE 1 on Redis), as if its TTL had
// passed. The suite then also checks loss reporting for expiry, not only for
// invalidation, and spends less time waiting.
type Expirer interface {
	// Expire ends key's lease on the store now, keeping its fence history.
	Expire(ctx context.Context, key string) error
}

// Guard is a resource protected by the fencing rule (see package
// [fencing]): one value, written only with a token the rule accepts.
type Guard interface {
	// Write stores value if, atomically with the write, the guard accepts
	// token from holder: greater than every accepted token, or equal to the
	// highest from the same holder. Otherwise it stores nothing and returns
	// an error wrapping [fencing.ErrStale] (or [fencing.ErrInvalidToken] for
	// a zero token).
	Write(ctx context.Context, token fencing.Token, holder, value string) error
	// Read returns the value stored last ("" if none).
	Read(ctx context.Context) (string, error)
}

// GuardMaker is implemented by harnesses whose store also guards resources
// (a Lua script on Redis, a Txn on etcd, an UPDATE on SQL). The suite's
// PausedHolder property writes through a new Guard from it; without a
// GuardMaker it uses an in-process [fencing.Guard].
type GuardMaker interface {
	// NewGuard returns a new, empty guarded resource.
	NewGuard(ctx context.Context) (Guard, error)
}

// Delayer is implemented by harnesses that can put latency between a
// backend and the store. The SentIsSendTime property uses it to check that
// [driver.Grant.Sent] and [driver.Renewal.Sent] are when a request
// was sent, not when its response arrived: a backend that takes the time
// after the round trip overstates its lease by the response's delay, so its
// holder's local deadline falls after the store has already let another
// owner in. Without a Delayer that check runs with no added latency and
// cannot tell the two apart (see GUIDE.md). [DelayReads] delays a
// net.Conn, for backends whose client takes a dial function.
type Delayer interface {
	// NewDelayedBackend is NewBackend for a backend whose responses from
	// the store reach it delay after the store sent them. Its requests
	// may travel at the normal speed.
	NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error)
}

// memGuard is the default Guard: a fencing.Guard in front of a string.
type memGuard struct {
	g     fencing.Guard
	mu    sync.Mutex
	value string
}

func (m *memGuard) Write(_ context.Context, token fencing.Token, holder, value string) error {
	return m.g.Do(token, holder, func() error {
		m.mu.Lock()
		m.value = value
		m.mu.Unlock()
		return nil
	})
}

func (m *memGuard) Read(context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.value, nil
}

// property is one checked property of the contract.
type property struct {
	name string
	doc  string // one sentence: what the property checks
	fn   func(t *testing.T, e *env)
}

// Run checks the backends of newHarness against the [driver.Backend]
// contract, one subtest per property (see the package documentation for
// the list). newHarness is called once per subtest, with that subtest's t,
// and may register cleanups on it; every backend the suite creates is
// closed before the subtest ends.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, p := range properties {
		t.Run(p.name, func(t *testing.T) {
			t.Log(p.doc)
			h := newHarness(t)
			if h == nil {
				t.Fatal("conformance: newHarness returned nil")
			}
			cfg, err := h.Config().resolve()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), cfg.Timeout)
			defer cancel()
			name := t.Name()
			watchdog := time.AfterFunc(cfg.Timeout+10*time.Second, func() {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic(fmt.Sprintf("conformance: %s still running %v after its deadline of %v; goroutines:\n%s",
					name, 10*time.Second, cfg.Timeout, buf[:n]))
			})
			defer watchdog.Stop()
			lag := schedlag.Start()
			e := &env{h: h, cfg: cfg, ttl: cfg.MinTTL, hold: min(20*cfg.MinTTL, fencedlock.MaxTTL), ctx: ctx, prefix: "conformance/" + p.name + "/" + randHex(6) + "/", lag: lag}
			defer func() {
				lag.Stop()
				t.Logf("scheduling lateness: max %v", lag.Max().Round(time.Millisecond))
			}()
			p.fn(t, e)
		})
	}
}

// env is the state of one property's run.
type env struct {
	h      Harness
	cfg    Config
	ttl    time.Duration // the lease of the timing properties: Config.MinTTL
	hold   time.Duration // the lease of keys that must not expire during a check
	ctx    context.Context
	prefix string // unique per run
	n      int
	lag    *schedlag.Monitor // the scheduling delay measured while the property runs (lag.go)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// owner returns a fresh 128-bit owner token, as the Locker makes them.
func owner() string { return rand.Text() }

// key returns a key unique to this run.
func (e *env) key(name string) string {
	e.n++
	return fmt.Sprintf("%s%s-%d", e.prefix, name, e.n)
}

// backend returns a new backend, closed when the test ends.
func (e *env) backend(t *testing.T) driver.Backend {
	t.Helper()
	b, err := e.h.NewBackend(e.ctx)
	if err != nil {
		t.Fatalf("harness NewBackend: %v", err)
	}
	if b == nil {
		t.Fatal("harness NewBackend returned a nil backend")
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// lockerOpts are the Locker options the suite uses, modified by mod: a
// long lease (e.hold) unless mod says otherwise.
func (e *env) lockerOpts(mod func(*fencedlock.Options)) fencedlock.Options {
	o := fencedlock.Options{
		TTL:           e.hold,
		MinRetryDelay: time.Millisecond,
		MaxRetryDelay: max(e.ttl/10, 5*time.Millisecond),
	}
	if mod != nil {
		mod(&o)
	}
	return o
}

// mustLocker returns fencedlock.New(b, opts), failing t if New refuses
// the options (internal/locktest).
var mustLocker = locktest.New

// locker returns a Locker on a new backend, closed when the test ends.
func (e *env) locker(t *testing.T, mod func(*fencedlock.Options)) *fencedlock.Locker {
	t.Helper()
	l := mustLocker(t, e.backend(t), e.lockerOpts(mod))
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// short makes a Locker's leases Config.MinTTL long, for the properties
// about renewal and expiry.
func (e *env) short(o *fencedlock.Options) { o.TTL = e.ttl }

// pausedHolder makes a Locker whose leases are short and never renewed by
// the watchdog: a holder that pauses past its lease.
func (e *env) pausedHolder(o *fencedlock.Options) { o.TTL, o.ManualRenew = e.ttl, true }

// grantTTL returns the lease length to reckon with for a grant of a
// requested lease: the TTL the backend reported, or the requested one if
// it reported none.
func grantTTL(d, requested time.Duration) time.Duration {
	if d <= 0 {
		return requested
	}
	return d
}

// grab makes one direct Backend.Acquire of key, with a long lease, for a
// fresh owner and fails the test unless it succeeds.
func (e *env) grab(t *testing.T, b driver.Backend, key string) driver.Grant {
	t.Helper()
	return e.grabTTL(t, b, key, e.hold)
}

func (e *env) grabTTL(t *testing.T, b driver.Backend, key string, ttl time.Duration) driver.Grant {
	t.Helper()
	req := driver.AcquireRequest{Key: key, Owner: owner(), TTL: ttl}
	g, err := b.Acquire(e.ctx, req)
	if err != nil {
		t.Fatalf("Acquire(%s) of a free key: %v", quote(key), err)
	}
	e.checkGrant(t, g, key, ttl)
	if g.Owner != req.Owner {
		t.Errorf("Grant.Owner of %s is not the request's owner token", quote(key)) // not printed: a secret
	}
	return g
}

// checkGrant checks the fields of a grant for key.
func (e *env) checkGrant(t *testing.T, g driver.Grant, key string, ttl time.Duration) {
	t.Helper()
	if g.Key != key {
		t.Errorf("Grant.Key = %s, want %s", quote(g.Key), quote(key))
	}
	if g.Fence == 0 {
		t.Errorf("Grant.Fence of %s is 0: the zero token is never granted", quote(key))
	}
	if g.TTL != 0 && g.TTL < ttl {
		t.Errorf("Grant.TTL = %v for a request of %v: a backend may round a TTL up, never down", g.TTL, ttl)
	}
	if !g.Sent.IsZero() && g.Sent.After(time.Now()) {
		t.Errorf("Grant.Sent lies %v in the future", time.Until(g.Sent))
	}
}

// held reports whether a fresh backend's one attempt at key finds it held
// (see heldOn).
func (e *env) held(t *testing.T, key string) bool {
	t.Helper()
	return e.heldOn(t, e.backend(t), key)
}

// mustBeHeld fails the test unless key is held, and the holder g (if given)
// still holds it: a renewal of g succeeds.
func (e *env) mustBeHeld(t *testing.T, b driver.Backend, g *driver.Grant, why string) {
	t.Helper()
	key := g.Key
	if !e.held(t, key) {
		t.Fatalf("%s: %s is free, want it still held by its holder (fence %v)", why, quote(key), g.Fence)
	}
	if _, err := b.Renew(e.ctx, *g, e.hold); err != nil {
		t.Fatalf("%s: the holder (fence %v) can no longer renew %s: %v", why, g.Fence, quote(key), err)
	}
}

// acquireBy polls b.Acquire for key until it succeeds and fails the test if
// an attempt sent after notAfter still finds the key held. It returns the
// grant, when the successful attempt was sent, and when it returned.
func (e *env) acquireBy(t *testing.T, b driver.Backend, key string, notAfter time.Time, why string) (g driver.Grant, sent, got time.Time) {
	t.Helper()
	g, sent, got, _ = e.acquireByGap(t, b, key, notAfter, why)
	return g, sent, got
}

// pollInterval is how long acquireBy sleeps between attempts.
func (e *env) pollInterval() time.Duration { return max(e.ttl/25, 2*time.Millisecond) }

// acquireByGap is acquireBy that also returns how long before the
// successful attempt the previous one was sent (or the call began): a long
// gap means the poller was descheduled, and cannot tell exactly when the
// key became free.
func (e *env) acquireByGap(t *testing.T, b driver.Backend, key string, notAfter time.Time, why string) (g driver.Grant, sent, got time.Time, gap time.Duration) {
	t.Helper()
	interval := e.pollInterval()
	prev := time.Now()
	for attempt := 0; ; attempt++ {
		sent = time.Now()
		g, err := b.Acquire(e.ctx, driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold})
		if err == nil {
			e.checkGrant(t, g, key, e.hold)
			return g, sent, time.Now(), sent.Sub(prev)
		}
		prev = sent
		if !errors.Is(err, fencedlock.ErrNotAcquired) {
			t.Fatalf("%s: Acquire(%s): %v", why, quote(key), err)
		}
		if sent.After(notAfter) {
			t.Fatalf("%s: %s is still held %v after the bound (attempt %d): %v",
				why, quote(key), sent.Sub(notAfter).Round(time.Millisecond), attempt+1, err)
		}
		if e.ctx.Err() != nil {
			t.Fatalf("%s: %v", why, e.ctx.Err())
		}
		time.Sleep(interval)
	}
}

// quote prints a key readably, shortening long ones.
func quote(key string) string {
	if len(key) > 80 {
		return fmt.Sprintf("%q...(%d bytes)", key[:60], len(key))
	}
	return fmt.Sprintf("%q", key)
}

// noSecret fails the test if s contains the owner token.
func noSecret(t *testing.T, what, s, token string) {
	t.Helper()
	if token != "" && strings.Contains(s, token) {
		t.Errorf("%s contains the owner token (a secret)", what)
	}
}

// lateTries bounds how often tryAcquire asks again after the Locker
// refused a grant as late.
const lateTries = 8

// tryAcquire is l.TryAcquire(e.ctx, key, opts...), asked again (at most
// lateTries times) while the Locker refuses the grant because its reply
// came back with less than the lease's safety margin left
// (fencedlock.ErrLateGrant). On a loaded machine a reply can take longer
// than a short conformance TTL; the Locker then releases the grant and
// hands out nothing, which says nothing about the backend. A backend that
// grants what it must not is still caught: the next, timely grant is
// handed out and judged. Every other outcome is returned as it is.
func (e *env) tryAcquire(t *testing.T, l *fencedlock.Locker, key string, opts ...fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	t.Helper()
	for i := 1; ; i++ {
		ls, err := l.TryAcquire(e.ctx, key, opts...)
		if !errors.Is(err, fencedlock.ErrLateGrant) || i == lateTries {
			return ls, err
		}
		t.Logf("TryAcquire(%s) refused as late (try %d of %d): %v", quote(key), i, lateTries, err)
	}
}

// mustTryAcquire is tryAcquire, failing t if the key is not acquired.
func (e *env) mustTryAcquire(t *testing.T, l *fencedlock.Locker, key string, opts ...fencedlock.LeaseOption) *fencedlock.Lease {
	t.Helper()
	ls, err := e.tryAcquire(t, l, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return ls
}
