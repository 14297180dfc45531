package rwlock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

// readSep separates a name from the sequence number that makes each read
// acquire's key in the readers' Locker distinct (see readKey): a Locker
// refuses a TryAcquire of a key it holds, and readers of one name share it.
// Names may not contain it.
const readSep = "\x00"

// nameOf returns the name of a key of a view: the key up to readSep.
func nameOf(key string) string {
	if i := strings.Index(key, readSep); i >= 0 {
		return key[:i]
	}
	return key
}

// tryKey marks the context of a TryLock: its writer registers no intent.
type tryKey struct{}

// ownerKey marks the context of a Lock: its view records the owner
// tokens of the writer's attempts, whose intents Lock removes when it gives
// up.
type ownerKey struct{}

// owners are the owner tokens of one Lock's attempts (secrets: kept in
// memory only, never printed).
type owners struct {
	mu sync.Mutex
	s  []string
}

func (o *owners) add(owner string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !slices.Contains(o.s, owner) {
		o.s = append(o.s, owner)
	}
}

func (o *owners) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.s)
}

// view is the [driver.Backend] of one mode of a [driver.RWLocker]: the
// Locker of that mode runs it, so a reader's or a writer's lease has the
// lock's watchdog, loss reporting and late-grant refusal as they are.
// Keys it is given are names, or read keys (name, readSep, a number).
type view struct {
	rw     driver.RWLocker
	mode   driver.RWMode
	intent time.Duration // a waiting writer's intent; 0 for readers
}

// BackendName names the backend the view runs on in trace events (see
// [driver.Namer]), not this package.
func (v *view) BackendName() string { return driver.Name(v.rw) }

// Acquire makes one attempt in the view's mode.
func (v *view) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	req.Key = nameOf(req.Key)
	intent := v.intent
	if ctx.Value(tryKey{}) != nil {
		intent = 0 // a TryLock gives up at once: its intent would block readers for nothing
	}
	if o, ok := ctx.Value(ownerKey{}).(*owners); ok && intent > 0 {
		o.add(req.Owner)
	}
	// The grant keeps the name: the Locker's lease of it (its Key, its
	// loss's cause, the errors of its Renew and Release, its log lines and
	// trace events) names the name, not the read key. Renew, Release and
	// the Locker's clean-up of an attempt get back a name or a read key.
	return v.rw.AcquireRW(ctx, driver.RWRequest{AcquireRequest: req, Mode: v.mode, Intent: intent})
}

// Renew renews g in the view's mode.
func (v *view) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	g.Key = nameOf(g.Key)
	return v.rw.RenewRW(ctx, g, v.mode, ttl)
}

// Release releases g in the view's mode.
func (v *view) Release(ctx context.Context, g driver.Grant) error {
	g.Key = nameOf(g.Key)
	return v.rw.ReleaseRW(ctx, g, v.mode)
}

// Close does nothing: the backend belongs to the caller.
func (v *view) Close() error { return nil }

// notifyView is a view of a backend that is a [driver.Notifier]: waiters
// are woken by the name's releases.
type notifyView struct {
	view
	n driver.Notifier
}

// Watch watches the name of key.
func (v *notifyView) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return v.n.Watch(ctx, nameOf(key))
}

// newView returns the Backend of mode m of rw (b is rw as a Backend).
func newView(b driver.Backend, rw driver.RWLocker, m driver.RWMode, intent time.Duration) driver.Backend {
	v := view{rw: rw, mode: m, intent: intent}
	if n, ok := b.(driver.Notifier); ok {
		return &notifyView{view: v, n: n}
	}
	return &v
}
