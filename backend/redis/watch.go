package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/redis/rueidis"
)

// unsubscribeTimeout bounds an UNSUBSCRIBE sent after the last watcher of a
// channel stopped (in the background; the watcher does not wait for it).
const unsubscribeTimeout = 5 * time.Second

// lingerFor is how long a channel used by a waiter of the fair queue
// stays subscribed after its last watcher stopped: a contended key is
// waited on again at once, and a waiter that finds its channel subscribed
// queues without a SUBSCRIBE round trip (see FairBackend.AcquireWait).
const lingerFor = time.Second

// hub multiplexes every watch of a Backend over one dedicated subscription
// connection, with one SUBSCRIBE per channel however many watchers it has.
//
// Locking: hub.mu guards everything but chanState.op, which serializes the
// SUBSCRIBE and UNSUBSCRIBE of one channel so that they reach the server in
// the order the watchers asked for them. Lock order: op, then mu.
//
// Goroutines: one monitor per connection (it ends when the connection is
// lost or released) and one per pending background UNSUBSCRIBE or
// resubscription; close waits for all of them.
type hub struct {
	c       rueidis.Client
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
	dc      rueidis.DedicatedClient
	release func()
	gen     uint64
	used    bool  // a SUBSCRIBE succeeded on it; guarded by hub.mu
	lost    error // why it ended, set by monitor before it gives it back; guarded by hub.mu
}

type chanState struct {
	name string
	op   sync.Mutex // held while sending SUBSCRIBE/UNSUBSCRIBE of name

	// guarded by hub.mu:
	watchers map[*watcher]struct{}
	byID     map[string]*watcher // the fair-queue waiters among watchers, by id
	subGen   uint64              // generation of the connection it is subscribed on; 0 if none
	unsure   bool                // a SUBSCRIBE ended with an error: the server may have applied it
	fair     bool                // a fair-queue waiter used it: it lingers (lingerFor)
	idle     time.Time           // when its last watcher stopped
	linger   *time.Timer         // pending unsubscribe of a lingering channel; nil if none
}

// watcher is one watch of a channel. A fair-queue waiter has an id (the
// hex SHA-1 of its owner token): release.lua's hand-off message names it,
// and wakes it alone, with the fence it was granted.
type watcher struct {
	ch    chan struct{}
	id    string
	fence atomic.Uint64 // set before ch is signalled by a hand-off message
}

func newHub(c rueidis.Client, log *slog.Logger, sharded bool) *hub {
	return &hub{c: c, log: log, sharded: sharded, chans: make(map[string]*chanState)}
}

func (h *hub) subscribeCmd(dc rueidis.DedicatedClient, channel string) rueidis.Completed {
	if h.sharded {
		return dc.B().Ssubscribe().Channel(channel).Build()
	}
	return dc.B().Subscribe().Channel(channel).Build()
}

func (h *hub) unsubscribeCmd(dc rueidis.DedicatedClient, channel string) rueidis.Completed {
	if h.sharded {
		return dc.B().Sunsubscribe().Channel(channel).Build()
	}
	return dc.B().Unsubscribe().Channel(channel).Build()
}

// watch registers a watcher of channel (a fair-queue waiter if id is not
// empty) and returns once the channel is subscribed.
func (h *hub) watch(ctx context.Context, key, channel, id string) (*watcher, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	w := &watcher{ch: make(chan struct{}, 1), id: id}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, errClosed("watch", key)
	}
	cs := h.chans[channel]
	if cs == nil {
		cs = &chanState{name: channel, watchers: make(map[*watcher]struct{})}
		h.chans[channel] = cs
	}
	cs.watchers[w] = struct{}{}
	if id != "" {
		if cs.byID == nil {
			cs.byID = make(map[string]*watcher)
		}
		cs.byID[id] = w
		cs.fair = true
	}
	h.mu.Unlock()

	if err := h.subscribe(ctx, cs); err != nil {
		h.unwatch(cs, w)
		return nil, nil, wrap("watch", key, err)
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
	// rueidis completes a SUBSCRIBE when the server's confirmation arrives,
	// so the watch is in effect when Do returns nil.
	err = conn.dc.Do(ctx, h.subscribeCmd(conn.dc, cs.name)).Error()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		cs.unsure = true
		if errors.Is(err, rueidis.ErrDedicatedClientRecycled) {
			// The connection was given back before the SUBSCRIBE was
			// sent: report why it ended (a closed client: ErrClosing).
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
	if h.conn == conn {
		cs.subGen = conn.gen
		conn.used = true
	} else {
		// The connection was lost meanwhile: the subscription is gone.
		return fmt.Errorf("subscription connection lost: %w", errLost)
	}
	return nil
}

var errLost = errors.New("connection lost")

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
	dc, release := h.c.Dedicate()
	h.gen++
	conn := &subConn{dc: dc, release: release, gen: h.gen}
	errs := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: h.onMessage})
	h.conn = conn
	h.wg.Add(1)
	go h.monitor(conn, errs)
	h.log.Debug("redis: subscription connection opened", "generation", conn.gen)
	return conn, nil
}

// onMessage runs on rueidis's reader goroutine: it only signals watchers.
// A hand-off message (release.lua: "granted <id> <fence>") wakes the
// waiter it names, if it is watching here, and no one else: the lock is
// not free. Any other message wakes every watcher of the channel.
func (h *hub) onMessage(m rueidis.PubSubMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[m.Channel]
	if cs == nil {
		return
	}
	if rest, ok := strings.CutPrefix(m.Message, grantedPrefix); ok {
		id, f, _ := strings.Cut(rest, " ")
		if w := cs.byID[id]; w != nil {
			if fence, err := strconv.ParseUint(f, 10, 64); err == nil && fence > 0 {
				w.fence.Store(fence)
			}
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
		return
	}
	cs.wakeLocked()
}

func (cs *chanState) wakeLocked() {
	for w := range cs.watchers {
		select {
		case w.ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// monitor waits for the end of conn. If conn was lost while the hub is
// open, it wakes every watcher (a release may have been missed) and, if
// conn had worked, subscribes the watched channels again on a new
// connection. A connection that never worked triggers nothing, so a down
// server cannot make this spin.
func (h *hub) monitor(conn *subConn, errs <-chan error) {
	defer h.wg.Done()
	err := <-errs
	h.mu.Lock()
	conn.lost = err
	current := h.conn == conn
	if current {
		h.conn = nil
	}
	closed := h.closed
	used := conn.used
	var live []*chanState
	if current {
		for _, cs := range h.chans {
			cs.wakeLocked()
			if len(cs.watchers) > 0 {
				live = append(live, cs)
			}
		}
	}
	h.mu.Unlock()
	if !current || closed {
		return
	}
	conn.release()
	h.log.Debug("redis: subscription connection lost", "generation", conn.gen, "err", err)
	if !used {
		return
	}
	for _, cs := range live {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
			defer cancel()
			if err := h.subscribe(ctx, cs); err != nil {
				h.log.Debug("redis: resubscribing failed; waiters fall back to TTL hints", "channel", cs.name, "err", err)
			}
		}()
	}
}

// unwatch removes w; the last watcher of a channel unsubscribes it in the
// background.
func (h *hub) unwatch(cs *chanState, w *watcher) {
	h.mu.Lock()
	delete(cs.watchers, w)
	if w.id != "" && cs.byID[w.id] == w {
		delete(cs.byID, w.id)
	}
	last := len(cs.watchers) == 0 && !h.closed
	if last && cs.fair {
		// Linger: unsubscribe lingerFor after the last watch stopped,
		// unless watched again meanwhile (see lingered).
		cs.idle = time.Now()
		if cs.linger == nil {
			h.wg.Add(1)
			cs.linger = time.AfterFunc(lingerFor, func() { h.lingered(cs) })
		}
		h.mu.Unlock()
		return
	}
	if last {
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if last {
		go func() {
			defer h.wg.Done()
			h.unsubscribe(cs)
		}()
	}
}

// lingered runs lingerFor after a fair channel's last watch stopped: it
// unsubscribes the channel if it is still unwatched and has been idle that
// long, or waits for the rest of the idle time.
func (h *hub) lingered(cs *chanState) {
	h.mu.Lock()
	if h.closed || len(cs.watchers) > 0 || cs.linger == nil {
		// Closed (close stops the timer; if it could not, it counts on
		// this call to end the wait group) or watched again.
		cs.linger = nil
		h.mu.Unlock()
		h.wg.Done()
		return
	}
	if rest := lingerFor - time.Since(cs.idle); rest > 0 {
		cs.linger.Reset(rest)
		h.mu.Unlock()
		return
	}
	cs.linger = nil
	h.mu.Unlock()
	defer h.wg.Done()
	h.unsubscribe(cs)
}

func (h *hub) unsubscribe(cs *chanState) {
	cs.op.Lock()
	defer cs.op.Unlock()
	h.mu.Lock()
	if len(cs.watchers) > 0 {
		h.mu.Unlock()
		return // watched again meanwhile
	}
	conn := h.conn
	send := conn != nil && (cs.subGen == conn.gen || cs.unsure)
	h.mu.Unlock()
	var err error
	if send {
		ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		err = conn.dc.Do(ctx, h.unsubscribeCmd(conn.dc, cs.name)).Error()
		cancel()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.log.Debug("redis: unsubscribe failed", "channel", cs.name, "err", err)
		cs.unsure = true
	} else {
		cs.subGen, cs.unsure = 0, false
	}
	if len(cs.watchers) == 0 && h.chans[cs.name] == cs && !cs.unsure {
		delete(h.chans, cs.name)
	}
}

// close ends the connection and waits for every goroutine of the hub.
// Watchers still registered get a wake-up; their next Acquire attempt
// reports ErrClosed.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	conn := h.conn
	h.conn = nil
	for _, cs := range h.chans {
		cs.wakeLocked()
		if cs.linger != nil && cs.linger.Stop() {
			h.wg.Done()
		}
		cs.linger = nil
	}
	h.mu.Unlock()
	if conn != nil {
		// Zero hooks close the error channel, which ends the monitor; the
		// connection goes back to rueidis's pool, which unsubscribes it.
		conn.dc.SetPubSubHooks(rueidis.PubSubHooks{})
		conn.release()
	}
	h.wg.Wait()
}
