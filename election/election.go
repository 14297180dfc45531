package election

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
)

// ErrNoLeader is returned by [Election.Leader] when no term is live.
var ErrNoLeader = errors.New("election: no leader")

// Leader is the state of an election: its current term's value, fence,
// holder id and remaining TTL.
type Leader = driver.LeaderInfo

// Event is one state delivered by [Election.Observe].
type Event = driver.LeaderEvent

// Election holds elections on one backend. It is safe for concurrent use.
type Election struct {
	l  *fencedlock.Locker
	el driver.Elector
}

// New returns an Election on b, with a Locker of its own made with opts
// (the terms' TTL, renewal and safety margin). b must implement
// [driver.Elector]; if it does not, New returns an error wrapping
// errors.ErrUnsupported. As with a Locker, the caller closes b after the
// Election.
func New(b driver.Backend, opts fencedlock.Options) (*Election, error) {
	el, ok := b.(driver.Elector)
	if !ok {
		return nil, fmt.Errorf("election: backend %T does not implement driver.Elector: %w", b, errors.ErrUnsupported)
	}
	l, err := fencedlock.New(b, opts)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	return &Election{l: l, el: el}, nil
}

// Close resigns every term the Election holds and closes its Locker.
func (e *Election) Close() error { return e.l.Close() }

// Term is one term of an election, led by the caller of Campaign. It is
// the term's lease: Fence, Holder, Context, Done, Err and Deadline are the
// lease's, and the term ends with it.
type Term struct {
	*fencedlock.Lease
	value []byte
}

// Value returns the value the leader stored with its term.
func (t *Term) Value() []byte { return slices.Clone(t.value) }

// Resign ends the term: its lease is released (see
// [fencedlock.Lease.Release]) and the next campaigner may lead.
func (t *Term) Resign(ctx context.Context) error { return t.Release(ctx) }

// Campaign blocks until the caller leads the election name, then stores
// value with the new term and returns it. If ctx ends first it returns an
// error wrapping ctx's error (and [fencedlock.ErrNotAcquired]), leaving no
// trace: a lease granted meanwhile is released. If the lease is lost
// before the value is stored (the watchdog saw the loss, or the backend
// refused the value because the lease no longer holds the key), it
// returns an error wrapping [fencedlock.ErrLeaseLost] (not
// context.Canceled). opts apply to the term's lease.
func (e *Election) Campaign(ctx context.Context, name string, value []byte, opts ...fencedlock.LeaseOption) (*Term, error) {
	ls, err := e.l.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("election: campaign %q: %w", name, err)
	}
	// The value is stored within both ctx and the lease: a lease lost
	// meanwhile cannot begin a term.
	pctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ls.Context(), cancel)
	err = e.el.Proclaim(pctx, name, ls.Fence(), ls.Holder(), value)
	stop()
	cancel()
	if err != nil {
		switch {
		case ctx.Err() == nil && ls.Context().Err() != nil && errors.Is(err, context.Canceled):
			// pctx was cancelled by the lease's end, not by the caller:
			// report the loss, not a cancellation the caller never asked for.
			err = fmt.Errorf("the term's lease ended before its value was stored: %w", context.Cause(ls.Context()))
		case errors.Is(err, driver.ErrNotHeld):
			// The server no longer holds the lease (its key evicted,
			// deleted, lost in a failover) before the watchdog saw it.
			err = fmt.Errorf("the term's lease was lost before its value was stored: %w", errors.Join(fencedlock.ErrLeaseLost, err))
		}
		_ = ls.Release(ctx) // detached from ctx's cancellation; the term never began
		if ctx.Err() != nil {
			err = errors.Join(err, fencedlock.ErrNotAcquired, ctx.Err())
		}
		return nil, fmt.Errorf("election: campaign %q: %w", name, err)
	}
	return &Term{Lease: ls, value: slices.Clone(value)}, nil
}

// Leader reads the current term of name, or returns an error wrapping
// [ErrNoLeader] if none is live.
func (e *Election) Leader(ctx context.Context, name string) (Leader, error) {
	if err := driver.ValidateKey(name); err != nil {
		return Leader{}, fmt.Errorf("election: leader: %w", err)
	}
	info, err := e.el.Leader(ctx, name)
	if err != nil {
		return Leader{}, fmt.Errorf("election: leader %q: %w", name, err)
	}
	if !info.Held {
		return Leader{}, fmt.Errorf("election: leader %q: %w", name, ErrNoLeader)
	}
	return info, nil
}

// Observe watches the election name. The channel first receives its
// current state (Held false if no term is live), then every change of
// leader in order: a term beginning, a term ending. It never delivers a
// term whose fence is below one it delivered, nor a term again after its
// end (a backend that reports one, as Redis may after a failover that
// lost a release, is filtered, and the next event says Missed), nor the
// same state twice in a row unless the second is marked Missed: an Event
// with Missed set
// follows changes it could not deliver (terms may have begun and ended
// meanwhile, even if the state is the same as before).
// The channel is closed when ctx is done, or when the backend ends the
// watch (it was closed, or lost its connection): a caller that keeps
// observing calls Observe again, and compares fences with what it saw.
func (e *Election) Observe(ctx context.Context, name string) (<-chan Event, error) {
	if err := driver.ValidateKey(name); err != nil {
		return nil, fmt.Errorf("election: observe: %w", err)
	}
	in, stop, err := e.el.WatchLeader(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("election: observe %q: %w", name, err)
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		defer stop()
		var o order
		for ev := range in {
			ev, ok := o.next(ev)
			if !ok {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// order keeps the events of one watch in order: a term below the newest
// delivered one, or the newest again after its end, is dropped (the next
// event is then marked Missed, since the backend broke its contract), as
// is a repeat of the last state unless it is marked Missed.
type order struct {
	first  bool // an event was delivered
	last   Leader
	newest uint64
	missed bool
}

func (o *order) next(ev Event) (Event, bool) {
	if ev.Held && (uint64(ev.Fence) < o.newest || uint64(ev.Fence) == o.newest && !(o.last.Held && o.last.Fence == ev.Fence)) {
		// Below the newest term delivered, or that term again after its
		// end: a term never begins twice.
		o.missed = true
		return Event{}, false
	}
	if o.first && ev.Held == o.last.Held && ev.Fence == o.last.Fence && !ev.Missed && !o.missed {
		return Event{}, false // a repeat; a repeat marked Missed is delivered: terms may have come and gone
	}
	ev.Missed = ev.Missed || o.missed
	o.first, o.last, o.missed = true, ev.LeaderInfo, false
	if ev.Held {
		o.newest = uint64(ev.Fence)
	}
	return ev, true
}
