package rediscore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// PubSub is what the wake-up hub needs of a Redis client: dedicated
// subscription connections. It is the (S)SUBSCRIBE part of the contract an
// adapter implements; the hub does the rest (one SUBSCRIBE per channel
// however many watchers, confirmation before a watch returns, wake-ups,
// reconnection, linger, close).
type PubSub interface {
	// Dial returns a new dedicated subscription connection, for SSUBSCRIBE
	// and SUNSUBSCRIBE if sharded (made on the node serving the slot of
	// the first channel subscribed), else SUBSCRIBE and UNSUBSCRIBE. It
	// sends nothing itself. onMessage is called for every message
	// published on a channel the connection is subscribed to, one call at
	// a time. The returned channel receives why the connection ended when
	// it is lost, and is then closed; after SubConn.Close it is closed,
	// with or without a value.
	Dial(sharded bool, onMessage func(channel, message string)) (SubConn, <-chan error)

	// Wrap turns an error of the client from the command op on key into
	// the backend's error (as Conn.Wrap).
	Wrap(op, key string, err error) error
}

// SubConn is one dedicated subscription connection of a [PubSub].
type SubConn interface {
	// Subscribe sends SUBSCRIBE (SSUBSCRIBE) of channel and returns once
	// the server confirmed it. On a connection that has ended it returns
	// an error wrapping ErrConnGone.
	Subscribe(ctx context.Context, channel string) error

	// Unsubscribe sends UNSUBSCRIBE (SUNSUBSCRIBE) of channel; it need
	// not wait for the server's confirmation.
	Unsubscribe(ctx context.Context, channel string) error

	// Close ends the connection (or gives it back to the client's pool,
	// unsubscribed) and returns once the adapter's goroutines of it have
	// ended. It is idempotent.
	Close()
}

// ErrConnGone is wrapped by the errors of a SubConn used after it ended.
var ErrConnGone = errors.New("subscription connection gone")

// errLost is wrapped when the connection was lost during a SUBSCRIBE.
var errLost = errors.New("connection lost")

// unsubscribeTimeout bounds an UNSUBSCRIBE sent after the last watcher of a
// channel stopped (in the background; the watcher does not wait for it),
// and a resubscription after a connection was lost.
const unsubscribeTimeout = 5 * time.Second

// lingerFor is how long a channel used by a waiter of the fair queue
// stays subscribed after its last watcher stopped: a contended key is
// waited on again at once, and a waiter that finds its channel subscribed
// queues without a SUBSCRIBE round trip (see the adapters' Backend.AcquireWait).
const lingerFor = time.Second

// hub multiplexes the watches of a backend (with ShardedPubSub, of one
// hash slot) over one dedicated subscription connection, with one
// SUBSCRIBE per channel however many watchers it has.
//
// Locking: hub.mu guards everything but chanState.op, which serializes the
// SUBSCRIBE and UNSUBSCRIBE of one channel so that they reach the server in
// the order the watchers asked for them. Lock order: op, then mu.
//
// Goroutines: one monitor per connection (it ends when the connection is
// lost or closed) and one per pending background UNSUBSCRIBE or
// resubscription; close waits for all of them.
type hub struct {
	ps      PubSub
	log     *slog.Logger
	wg      sync.WaitGroup
	sharded bool // SSUBSCRIBE/SUNSUBSCRIBE instead of SUBSCRIBE/UNSUBSCRIBE

	mu     sync.Mutex
	closed bool
	conn   *subConn // nil while not connected
	gen    uint64   // generation of the latest connection
	chans  map[string]*chanState
}

type subConn struct {
	c    SubConn
	gen  uint64
	used bool  // a SUBSCRIBE succeeded on it; guarded by hub.mu
	lost error // why it ended, set by monitor; guarded by hub.mu
}

type chanState struct {
	name string
	op   sync.Mutex // held while sending SUBSCRIBE/UNSUBSCRIBE of name

	// guarded by hub.mu:
	watchers map[*Watcher]struct{}
	byID     map[string]*Watcher // the fair-queue waiters among watchers, by id
	subGen   uint64              // generation of the connection it is subscribed on; 0 if none
	unsure   bool                // a SUBSCRIBE ended with an error: the server may have applied it
	fair     bool                // a fair-queue waiter used it: it lingers (lingerFor)
	idle     time.Time           // when its last watcher stopped
	linger   *time.Timer         // pending unsubscribe of a lingering channel; nil if none
}

// Watcher is one watch of a channel. A fair-queue waiter has an id (the
// hex SHA-1 of its owner token): release.lua's hand-off message names it,
// and wakes it alone, with the fence it was granted.
type Watcher struct {
	c     chan struct{}
	id    string
	fence atomic.Uint64 // set before c is signalled by a hand-off message
}

// C receives a value when the channel's lock is released (or handed to
// this waiter), and when the subscription connection is lost (a release
// may have been missed). A wake-up not yet received is not doubled.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Fence is the fence of the last hand-off message naming this waiter, or
// 0 if none came.
func (w *Watcher) Fence() uint64 { return w.fence.Load() }

func newHub(ps PubSub, log *slog.Logger, sharded bool) *hub {
	return &hub{ps: ps, log: log, sharded: sharded, chans: make(map[string]*chanState)}
}

// watch registers a watcher of channel (a fair-queue waiter if id is not
// empty) and returns once the channel is subscribed.
func (h *hub) watch(ctx context.Context, key, channel, id string) (*Watcher, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	w := &Watcher{c: make(chan struct{}, 1), id: id}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, redisscript.ErrClosed("watch", key)
	}
	cs := h.chans[channel]
	if cs == nil {
		cs = &chanState{name: channel, watchers: make(map[*Watcher]struct{})}
		h.chans[channel] = cs
	}
	cs.watchers[w] = struct{}{}
	if id != "" {
		if cs.byID == nil {
			cs.byID = make(map[string]*Watcher)
		}
		cs.byID[id] = w
		cs.fair = true
	}
	h.mu.Unlock()

	if err := h.subscribe(ctx, cs); err != nil {
		h.unwatch(cs, w)
		return nil, nil, h.ps.Wrap("watch", key, err)
	}
	var once sync.Once
	return w, func() { once.Do(func() { h.unwatch(cs, w) }) }, nil
}

// subscribed reports whether channel is subscribed on the live connection
// (watched, or lingering after its last watch). It takes the name as
// bytes, built on the caller's stack: the lookup copies nothing.
func (h *hub) subscribed(channel []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[string(channel)]
	return cs != nil && h.conn != nil && cs.subGen == h.conn.gen
}

// subscribe makes sure cs is subscribed on the current connection, dialing
// one if needed. It returns after the server confirmed the subscription.
func (h *hub) subscribe(ctx context.Context, cs *chanState) error {
	cs.op.Lock()
	defer cs.op.Unlock()
	conn, err := h.connect()
	if err != nil {
		return err
	}
	h.mu.Lock()
	done := cs.subGen == conn.gen
	h.mu.Unlock()
	if done {
		return nil
	}
	err = conn.c.Subscribe(ctx, cs.name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		cs.unsure = true
		if errors.Is(err, ErrConnGone) {
			// The connection ended before the confirmation: report why
			// (a closed client: its own "closed" error).
			switch {
			case conn.lost != nil:
				err = fmt.Errorf("subscription connection lost: %w", conn.lost)
			case h.closed:
				err = driver.ErrClosed
			default:
				err = fmt.Errorf("subscription connection lost: %w: %w", errLost, err)
			}
		}
		return err
	}
	if h.conn != conn {
		// The connection was lost meanwhile: the subscription is gone.
		return fmt.Errorf("subscription connection lost: %w", errLost)
	}
	cs.subGen = conn.gen
	conn.used = true
	return nil
}

// connect returns the current subscription connection, making one if
// there is none.
func (h *hub) connect() (*subConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, driver.ErrClosed
	}
	if h.conn != nil {
		return h.conn, nil
	}
	c, errs := h.ps.Dial(h.sharded, h.onMessage)
	h.gen++
	conn := &subConn{c: c, gen: h.gen}
	h.conn = conn
	h.wg.Add(1)
	go h.monitor(conn, errs)
	h.log.Debug("redis: subscription connection opened", "generation", conn.gen, "sharded", h.sharded)
	return conn, nil
}
