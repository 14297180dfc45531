package goredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/redis/go-redis/v9"
)

// Timeouts of the subscription connection.
const (
	// unsubscribeTimeout bounds an UNSUBSCRIBE sent when the last watcher
	// of a channel stops.
	unsubscribeTimeout = 5 * time.Second
	// pingInterval is how long the receive loop waits for a message before
	// it PINGs the connection, so that a dead connection is noticed (its
	// watchers are then woken: a release may have been missed).
	pingInterval = 15 * time.Second
	// reconnectBackoff is the pause of the receive loop after a receive
	// error, before go-redis reconnects and resubscribes.
	reconnectBackoff = 100 * time.Millisecond
)

// hub multiplexes every watch of a Backend (or, with ShardedPubSub, of one
// hash slot) over one go-redis PubSub: one connection, one SUBSCRIBE per
// channel however many watchers it has. One goroutine (loop) receives
// everything: messages wake the channel's watchers, subscription
// confirmations let Watch return, and a lost connection wakes every
// watcher (go-redis then reconnects and resubscribes).
//
// Locking: op serializes SUBSCRIBE and UNSUBSCRIBE so that they reach the
// server in the order the watchers asked for them; mu guards the maps.
// Lock order: op, then mu.
type hub struct {
	ps      *redis.PubSub
	log     *slog.Logger
	sharded bool
	ctx     context.Context // of the receive loop; canceled by close
	cancel  context.CancelFunc
	done    chan struct{} // closed when loop returns
	started bool          // the receive loop runs; guarded by op

	op    sync.Mutex
	mu    sync.Mutex
	chans map[string]*chanState
}

type chanState struct {
	watchers map[*watcher]struct{}
	pending  int           // SUBSCRIBEs sent and not yet confirmed
	ready    chan struct{} // closed when pending reaches 0
}

type watcher struct{ ch chan struct{} }

// newHub makes the PubSub of c, subscribed to nothing yet. Its connection
// is opened by the first SUBSCRIBE (a cluster client opens it on the node
// serving that channel's slot, which SSUBSCRIBE needs), after which the
// receive loop starts.
func newHub(c redis.UniversalClient, log *slog.Logger, sharded bool) *hub {
	var ps *redis.PubSub
	if sharded {
		ps = c.SSubscribe(context.Background())
	} else {
		ps = c.Subscribe(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{ps: ps, log: log, sharded: sharded, ctx: ctx, cancel: cancel, done: make(chan struct{}), chans: make(map[string]*chanState)}
}

func (h *hub) subscribe(ctx context.Context, ch string) error {
	if h.sharded {
		return h.ps.SSubscribe(ctx, ch)
	}
	return h.ps.Subscribe(ctx, ch)
}

func (h *hub) unsubscribe(ctx context.Context, ch string) error {
	if h.sharded {
		return h.ps.SUnsubscribe(ctx, ch)
	}
	return h.ps.Unsubscribe(ctx, ch)
}

// loop receives from the PubSub until close.
func (h *hub) loop(ctx context.Context) {
	defer close(h.done)
	for ctx.Err() == nil {
		msg, err := h.ps.ReceiveTimeout(ctx, pingInterval)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet connection: check it is alive. A failed PING
				// makes go-redis reconnect.
				if perr := h.ps.Ping(ctx); perr == nil {
					continue
				}
			}
			h.log.Debug("redis: subscription connection lost; waking every watcher", "err", err)
			h.wakeAll()
			select {
			case <-time.After(reconnectBackoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			h.wake(m.Channel)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.confirmed(m.Channel)
			}
		}
	}
}

func (h *hub) wake(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cs := h.chans[channel]; cs != nil {
		for w := range cs.watchers {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.chans {
		for w := range cs.watchers {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

func (h *hub) confirmed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cs := h.chans[channel]; cs != nil && cs.pending > 0 {
		cs.pending--
		if cs.pending == 0 {
			close(cs.ready)
		}
	}
}

// watch adds a watcher of channel, subscribing to it if it is the first,
// and returns once the server confirmed the subscription (or ctx ends).
func (h *hub) watch(ctx context.Context, key, channel string) (<-chan struct{}, func(), error) {
	w := &watcher{ch: make(chan struct{}, 1)}
	h.op.Lock()
	h.mu.Lock()
	cs := h.chans[channel]
	first := cs == nil
	if first {
		cs = &chanState{watchers: make(map[*watcher]struct{}), pending: 1, ready: make(chan struct{})}
		h.chans[channel] = cs
	}
	cs.watchers[w] = struct{}{}
	ready := cs.ready
	h.mu.Unlock()
	var err error
	if first {
		err = h.subscribe(ctx, channel)
		if err == nil && !h.started {
			h.started = true
			go h.loop(h.ctx)
		}
	}
	h.op.Unlock()
	stop := func() { h.stop(channel, w) }
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("redis: watch %q: subscribe: %w", key, err)
	}
	select {
	case <-ready:
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	case <-h.ctx.Done(): // the backend was closed
		stop()
		return nil, nil, errClosed("watch", key)
	}
	h.log.Debug("redis: watching", "channel", channel)
	return w.ch, stop, nil
}

// stop removes w; the last watcher of channel unsubscribes it.
func (h *hub) stop(channel string, w *watcher) {
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	cs := h.chans[channel]
	last := false
	if cs != nil {
		delete(cs.watchers, w)
		if len(cs.watchers) == 0 {
			delete(h.chans, channel)
			last = true
		}
	}
	h.mu.Unlock()
	if last {
		ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
		defer cancel()
		if err := h.unsubscribe(ctx, channel); err != nil && !errors.Is(err, redis.ErrClosed) {
			h.log.Debug("redis: unsubscribe failed", "channel", channel, "err", err)
		}
	}
}

// close closes the PubSub and waits for the receive loop.
func (h *hub) close() {
	h.cancel()
	h.op.Lock()
	started := h.started
	h.started = true // no loop starts after close
	h.op.Unlock()
	_ = h.ps.Close()
	if started {
		<-h.done
	}
}

// hubFor returns the hub that watches channel and a function to call once
// the watch made on it ends.
func (b *Backend) hubFor(channel string) (*hub, func(), error) {
	b.hubsMu.Lock()
	defer b.hubsMu.Unlock()
	if b.done {
		return nil, nil, driver.ErrClosed
	}
	if !b.opts.ShardedPubSub {
		if b.hub == nil {
			b.hub = newHub(b.c, b.opts.Logger, false)
		}
		return b.hub, func() {}, nil
	}
	slot := keySlot(channel)
	sh := b.hubs[slot]
	if sh == nil {
		if len(b.hubs) >= b.opts.MaxShardedConns {
			return nil, nil, fmt.Errorf("%d %w", len(b.hubs), errTooManySlots)
		}
		sh = &slotHub{h: newHub(b.c, b.opts.Logger, true)}
		b.hubs[slot] = sh
	}
	sh.refs++
	return sh.h, func() { b.unref(slot, sh) }, nil
}

// errTooManySlots is returned by hubFor when MaxShardedConns slots are
// watched already.
var errTooManySlots = errors.New("hash slots watched at once reach Options.MaxShardedConns")

// unref ends one watch of sh; the last one closes the hub (closing a
// PubSub closes its connection, without a round trip).
func (b *Backend) unref(slot uint16, sh *slotHub) {
	b.hubsMu.Lock()
	sh.refs--
	idle := sh.refs == 0 && b.hubs != nil && b.hubs[slot] == sh
	if idle {
		delete(b.hubs, slot)
	}
	b.hubsMu.Unlock()
	if idle {
		sh.h.close()
		b.opts.Logger.Debug("redis: idle sharded subscription connection closed", "slot", slot)
	}
}

// Watch implements [driver.Notifier]: the returned channel receives a
// value when the release script publishes on key's channel (and when the
// subscription connection is lost, since a release may have been missed).
// All watches share one subscription connection (with
// Options.ShardedPubSub, one per hash slot watched), with one SUBSCRIBE
// per channel. The subscription is confirmed by the server before Watch
// returns. stop must be called once.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.closed.Load() {
		return nil, nil, errClosed("watch", key)
	}
	ch := b.Channel(key)
	h, unref, err := b.hubFor(ch)
	if errors.Is(err, driver.ErrClosed) {
		return nil, nil, errClosed("watch", key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	notify, stop, err := h.watch(ctx, key, ch)
	if err != nil {
		unref()
		return nil, nil, err
	}
	var once sync.Once
	return notify, func() {
		once.Do(func() {
			stop()
			unref()
		})
	}, nil
}

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (or of the whole key), modulo 16384.
func keySlot(key string) uint16 {
	if s := indexByte(key, '{'); s >= 0 {
		if e := indexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
