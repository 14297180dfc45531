package rwlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/leasectx"
	"github.com/fencedlock/fencedlock/internal/redact"
)

// Mode is a lease's mode: [Read] (shared) or [Write] (exclusive).
type Mode = driver.RWMode

// The modes of a lease.
const (
	Read  = driver.Read  // shared: many readers, no writer
	Write = driver.Write // exclusive: one writer, no reader
)

// intentSlack is added to twice the Locker's MaxRetryDelay to make a
// waiting writer's intent: it outlives the longest pause between the end
// of one attempt of the writer and the next (each refreshes it), with
// room for a round trip. What the backend's attempt spends after writing
// the intent (Redis's WAIT) the backend adds (see driver.RWRequest.Intent).
const intentSlack = 250 * time.Millisecond

// RWLock grants read and write leases of read-write locks on one backend.
// It is safe for concurrent use.
type RWLock struct {
	rd, wr *fencedlock.Locker
	rw     driver.RWLocker
	intent time.Duration
	seq    atomic.Uint64 // makes the readers' Locker keys distinct
	// leases maps the live leases' *fencedlock.Lease to their *Lease:
	// nested finds by it the lease a context comes from (the root marks
	// its leases' contexts, internal/leasectx). An entry goes when its
	// lease's context ends (released or lost).
	leases sync.Map

	mu       sync.Mutex
	closed   bool
	cleanups sync.WaitGroup // the Locks under way, whose removal of their intents Close waits for
}

// New returns an RWLock on b, with a Locker per mode made with opts (the
// leases' TTL, renewal, safety margin, the waiters' retry delays). b must
// implement [driver.RWLocker]; if it does not, New returns an error
// wrapping errors.ErrUnsupported. A backend that is a [driver.Notifier]
// wakes waiters when a holder releases; others poll with the Locker's
// backoff. As with a Locker, the caller closes b after the RWLock.
func New(b driver.Backend, opts fencedlock.Options) (*RWLock, error) {
	rw, ok := b.(driver.RWLocker)
	if !ok {
		return nil, fmt.Errorf("rwlock: backend %T does not implement driver.RWLocker: %w", b, errors.ErrUnsupported)
	}
	rd, err := fencedlock.New(newView(b, rw, Read, 0), readOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("rwlock: %w", err)
	}
	intent := 2*rd.Options().MaxRetryDelay + intentSlack
	wr, err := fencedlock.New(newView(b, rw, Write, intent), opts)
	if err != nil {
		return nil, fmt.Errorf("rwlock: %w", err)
	}
	return &RWLock{rd: rd, wr: wr, rw: rw, intent: intent}, nil
}

// Intent returns how long a waiting writer's intent outlives the end of
// its last attempt (each attempt refreshes it). A writer whose Lock gave
// up (its context ended) removes its intent; only if that removal failed
// or its process died does the intent keep new readers out of the name
// for this long after its last attempt, plus what the backend adds: with
// Redis's WaitReplicas the intent runs Intent + WaitTimeout from the
// attempt's script, so a WAIT that returned early leaves it up to
// WaitTimeout longer; etcd rounds it up to whole seconds and expires it up
// to about a second late.
func (r *RWLock) Intent() time.Duration { return r.intent }

// Close releases every lease the RWLock holds, ends its waiting RLock and
// Lock calls and closes its Lockers. It returns once a Lock it ended has
// removed its intent, so that the caller may then close the backend; it
// waits for that at most the Options' ReleaseTimeout and closeGrace (a
// Lock's attempt on its caller's context may not end with Close).
func (r *RWLock) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := errors.Join(r.rd.Close(), r.wr.Close())
	done := make(chan struct{})
	go func() {
		r.cleanups.Wait()
		close(done)
	}()
	bound := r.wr.Options().ReleaseTimeout + closeGrace
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		err = errors.Join(err, fmt.Errorf("rwlock: close: a Lock still running %v after its Locker closed", bound))
	}
	return err
}

// closeGrace is how long Close waits, beyond ReleaseTimeout, for the Locks
// it ended to remove their intents.
const closeGrace = time.Second

// Lease is a read or write lease of a name, held by the caller of RLock,
// Lock, TryRLock or TryLock. It is a [fencedlock.Lease] (Fence, Holder,
// Context, Done, Err, Deadline, Renew and Release are the lease's: the
// watchdog renews it and reports its loss) whose Key is the name.
type Lease struct {
	*fencedlock.Lease
	name string
	mode Mode
	r    *RWLock
}

// Context returns the lease's context ([fencedlock.Lease.Context]: ended
// with the lease, its cause the reason), the same as that of the
// fencedlock.Lease it embeds. A lease of the same name from the same
// RWLock, asked for on either or on a context derived from them, would
// wait for this lease: a Lock (an upgrade of a read
// lease, a second write lease) and an RLock while this is the write lease
// always, and an RLock while this is a read lease whenever a writer waits
// (writer preference; sync.RWMutex forbids recursive read locking for the
// same reason). They fail at once with an error wrapping
// [fencedlock.ErrHeldByLocker] and [fencedlock.ErrNotAcquired], as a
// Locker's nested Acquire does, and register no intent.
func (l *Lease) Context() context.Context { return l.Lease.Context() }

// nested returns the error of an acquire of name in mode m on ctx, which
// comes from a live lease of name from r, or nil.
func (r *RWLock) nested(ctx context.Context, name string, m Mode) error {
	ls, _ := ctx.Value(leasectx.Key{}).(*fencedlock.Lease)
	if ls == nil {
		return nil
	}
	v, _ := r.leases.Load(ls)
	from, _ := v.(*Lease)
	if from == nil || from.name != name || from.Err() != nil {
		return nil
	}
	return fmt.Errorf("the context comes from this RWLock's %v lease of %q (fence %d), which a %v lease may wait for; release it first (a lease is not upgraded, downgraded or nested): %w (%w)",
		from.mode, name, from.Fence(), m, fencedlock.ErrHeldByLocker, fencedlock.ErrNotAcquired)
}

// Key returns the name of the read-write lock.
func (l *Lease) Key() string { return l.name }

// Mode returns [Read] or [Write].
func (l *Lease) Mode() Mode { return l.mode }

// leaseView is what a printed Lease shows.
type leaseView struct {
	Name   string
	Mode   string
	Fence  fencing.Token
	Holder string
	TTL    time.Duration
}

func (l *Lease) view() leaseView {
	return leaseView{Name: l.name, Mode: l.mode.String(), Fence: l.Fence(), Holder: l.Holder(), TTL: l.TTL()}
}

// Format implements [fmt.Formatter]: every verb prints the lease's name,
// mode, fence, holder id and TTL, never its owner token.
func (l *Lease) Format(f fmt.State, verb rune) { redact.Format(f, verb, "&rwlock.Lease", l.view()) }

// String returns the lease's name, mode, fence, holder id and TTL.
func (l *Lease) String() string { return fmt.Sprintf("%+v", l.view()) }

// LogValue implements [slog.LogValuer]: what String shows.
func (l *Lease) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", l.name), slog.String("mode", l.mode.String()),
		slog.Uint64("fence", uint64(l.Fence())), slog.String("holder", l.Holder()), slog.Duration("ttl", l.TTL()))
}

// MarshalJSON encodes what a printed lease shows.
func (l *Lease) MarshalJSON() ([]byte, error) { return json.Marshal(l.view()) }

// RLock blocks until the caller holds a read lease of name, or ctx is
// done. Readers share the name; a reader waits while a writer holds it or
// while a writer waits for it (writer preference: readers cannot starve
// a writer). When ctx ends first the error wraps
// [fencedlock.ErrNotAcquired] and ctx.Err(), and nothing is left held.
func (r *RWLock) RLock(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return r.acquire(ctx, name, Read, true, opts)
}

// Lock blocks until the caller holds the write lease of name, or ctx is
// done. While it waits it keeps an intent on the server that refuses new
// readers; once it gives up it removes the intent, which otherwise
// (the removal failed) expires as [RWLock.Intent] says.
// Its fence is greater than the fence of every lease of name, read or
// write, granted before it.
func (r *RWLock) Lock(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return r.acquire(ctx, name, Write, true, opts)
}

// TryRLock makes one attempt at a read lease of name; an error wrapping
// [fencedlock.ErrNotAcquired] if a writer holds or awaits it.
func (r *RWLock) TryRLock(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return r.acquire(ctx, name, Read, false, opts)
}

// TryLock makes one attempt at the write lease of name (registering no
// intent); an error wrapping [fencedlock.ErrNotAcquired] if it is held.
func (r *RWLock) TryLock(ctx context.Context, name string, opts ...fencedlock.LeaseOption) (*Lease, error) {
	return r.acquire(ctx, name, Write, false, opts)
}

func (r *RWLock) acquire(ctx context.Context, name string, m Mode, wait bool, opts []fencedlock.LeaseOption) (*Lease, error) {
	op := m.String() + " lock"
	if err := validate(name); err != nil {
		return nil, fmt.Errorf("rwlock: %s: %w", op, err)
	}
	if err := r.nested(ctx, name, m); err != nil {
		return nil, fmt.Errorf("rwlock: %s %q: %w", op, name, err)
	}
	l, key := r.wr, name
	if m == Read {
		l, key = r.rd, name+readSep+strconv.FormatUint(r.seq.Add(1), 10)
	}
	var (
		ls  *fencedlock.Lease
		err error
	)
	if wait && m == Write {
		ls, err = r.lock(ctx, key, opts)
	} else if wait {
		ls, err = l.Acquire(ctx, key, opts...)
	} else {
		ls, err = l.TryAcquire(context.WithValue(ctx, tryKey{}, true), key, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("rwlock: %s %q: %w", op, name, nameErr(err, key))
	}
	lease := &Lease{Lease: ls, name: name, mode: m, r: r}
	r.leases.Store(ls, lease)
	context.AfterFunc(ls.Context(), func() { r.leases.Delete(ls) })
	return lease, nil
}

// lock waits for the write lease of name. If it gives up, it removes the
// intents its attempts registered (a release of each attempt's owner,
// bounded by the Locker's ReleaseTimeout, detached from ctx's end); an
// intent whose removal failed expires as Intent says.
func (r *RWLock) lock(ctx context.Context, name string, opts []fencedlock.LeaseOption) (*fencedlock.Lease, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("fencedlock: acquire %q: %w", name, fencedlock.ErrClosed)
	}
	r.cleanups.Add(1) // before Close's Wait: Close sets closed first
	r.mu.Unlock()
	defer r.cleanups.Done()
	o := &owners{}
	ls, err := r.wr.Acquire(context.WithValue(ctx, ownerKey{}, o), name, opts...)
	if err == nil {
		return ls, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.wr.Options().ReleaseTimeout)
	defer cancel()
	for _, owner := range o.all() {
		_ = r.rw.ReleaseRW(rctx, driver.Grant{Key: name, Owner: owner}, Write) // not held: ends the intent only
	}
	return nil, err
}

// maxSeq is the longest suffix readKey adds to a name.
const maxSeq = len(readSep) + 20

// validate refuses a name a Locker would refuse, or that contains readSep
// or is too long for a reader's key.
func validate(name string) error {
	if err := driver.ValidateKey(name); err != nil {
		return err
	}
	if strings.Contains(name, readSep) {
		return fmt.Errorf("name %q contains a NUL byte: %w", name, fencedlock.ErrInvalid)
	}
	if len(name) > driver.MaxKeyLen-maxSeq {
		return fmt.Errorf("name of %d bytes exceeds %d: %w", len(name), driver.MaxKeyLen-maxSeq, fencedlock.ErrInvalid)
	}
	return nil
}
