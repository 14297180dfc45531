package rediscore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// Hubs is the wake-up side of a Redis backend: the waiters of a lock
// subscribe to its "released" channel and are woken when release.lua
// publishes on it. Without ShardedPubSub every watch shares one
// subscription connection. With it, watches use SSUBSCRIBE, which must be
// sent to the node serving the channel's hash slot: one connection (one
// hub) per slot watched at the moment, at most maxConns; a slot's hub
// lives while it has watches and is closed in the background after the
// last one stops (Close waits for that).
type Hubs struct {
	ps       PubSub
	log      *slog.Logger
	maxConns int
	hub      *hub // nil when sharded: see slots

	mu      sync.Mutex
	sharded bool
	closed  bool
	slots   map[uint16]*slotHub
	closing int           // hubs removed from slots, still closing
	freed   chan struct{} // closed (and replaced) when one of them is closed
	reclaim sync.WaitGroup
}

// slotHub is the hub of one hash slot and the number of watches using it
// (guarded by Hubs.mu).
type slotHub struct {
	h    *hub
	refs int
}

// ErrTooManySlots is returned by a sharded Watch when maxConns slots are
// watched already and none is being given back.
var ErrTooManySlots = errors.New("hash slots watched at once reach Options.MaxShardedConns")

// NewHubs returns the hubs of a backend on ps; with sharded, at most
// maxConns hash slots are watched at once. It sends nothing: connections
// are made by the first watch that needs them.
func NewHubs(ps PubSub, log *slog.Logger, sharded bool, maxConns int) *Hubs {
	hs := &Hubs{ps: ps, log: log, maxConns: maxConns, sharded: sharded}
	if sharded {
		hs.slots = make(map[uint16]*slotHub)
		hs.freed = make(chan struct{})
	} else {
		hs.hub = newHub(ps, log, false)
	}
	return hs
}

// Watch subscribes to channel, the "released" channel of key, and returns
// once the server confirmed the subscription: a release published after
// Watch returned wakes the watcher. id names a fair-queue waiter (see
// [Watcher]); empty for any other watch. stop ends the watch; it may be
// called more than once. With sharded hubs and maxConns slots watched,
// Watch waits (bounded by ctx) for the hub of a slot being given back, or
// fails at once (an error wrapping ErrTooManySlots) if none is.
func (hs *Hubs) Watch(ctx context.Context, key, channel, id string) (w *Watcher, stop func(), err error) {
	h, unref, err := hs.hubFor(ctx, channel)
	if errors.Is(err, driver.ErrClosed) {
		return nil, nil, redisscript.ErrClosed("watch", key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redis: watch %q: %w", key, err)
	}
	w, stopW, err := h.watch(ctx, key, channel, id)
	if err != nil {
		unref()
		return nil, nil, err
	}
	var once sync.Once
	return w, func() {
		once.Do(func() {
			stopW()
			unref()
		})
	}, nil
}

// Notify is Watch as [driver.Notifier] has it: the watcher's channel
// and stop, for a watch that is not a fair-queue waiter's.
func (hs *Hubs) Notify(ctx context.Context, key, channel string) (<-chan struct{}, func(), error) {
	w, stop, err := hs.Watch(ctx, key, channel, "")
	if err != nil {
		return nil, nil, err
	}
	return w.C(), stop, nil
}

// Subscribed reports whether channel is subscribed on the shared
// connection (watched, or lingering after the last watch of a fair-queue
// waiter); always false with sharded hubs. It allocates nothing.
func (hs *Hubs) Subscribed(channel []byte) bool {
	return hs.hub != nil && hs.hub.subscribed(channel)
}

// Conns returns the number of sharded hubs holding a connection: those of
// watched slots and those being given back (0 without sharding).
func (hs *Hubs) Conns() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.slots) + hs.closing
}

// Close ends every subscription and waits for the goroutines of the hubs.
// A Watch after Close, or waiting for its confirmation, returns an error
// wrapping driver.ErrClosed. It is idempotent.
func (hs *Hubs) Close() {
	if hs.hub != nil {
		hs.hub.close()
	}
	hs.mu.Lock()
	hs.closed = true
	slots := hs.slots
	hs.slots = nil
	hs.mu.Unlock()
	for _, sh := range slots {
		sh.h.close()
	}
	hs.reclaim.Wait()
}

// hubFor returns the hub that watches channel (the only one, or when
// sharded the one of channel's hash slot) and a function to call once the
// watch made on it ends.
func (hs *Hubs) hubFor(ctx context.Context, channel string) (*hub, func(), error) {
	if !hs.sharded {
		return hs.hub, func() {}, nil
	}
	slot := HashSlot(channel)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for {
		if hs.closed {
			return nil, nil, driver.ErrClosed
		}
		sh := hs.slots[slot]
		if sh == nil && len(hs.slots)+hs.closing < hs.maxConns {
			sh = &slotHub{h: newHub(hs.ps, hs.log, true)}
			hs.slots[slot] = sh
		}
		if sh != nil {
			sh.refs++
			return sh.h, func() { hs.unref(slot, sh) }, nil
		}
		// Hubs still closing hold their connection: they count.
		if hs.closing == 0 {
			return nil, nil, fmt.Errorf("%d %w", len(hs.slots), ErrTooManySlots)
		}
		freed := hs.freed
		hs.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			hs.mu.Lock()
			return nil, nil, ctx.Err()
		}
		hs.mu.Lock()
	}
}

// unref ends one watch of sh; the last one removes the hub and closes it
// (its connection is closed, or given back to the client's pool
// unsubscribed) in the background, so that stopping a watch does not wait
// for the server.
func (hs *Hubs) unref(slot uint16, sh *slotHub) {
	hs.mu.Lock()
	sh.refs--
	idle := sh.refs == 0 && !hs.closed && hs.slots[slot] == sh
	if idle {
		delete(hs.slots, slot)
		hs.closing++
		hs.reclaim.Add(1)
	}
	hs.mu.Unlock()
	if !idle {
		return
	}
	go func() {
		defer hs.reclaim.Done()
		sh.h.close()
		hs.mu.Lock()
		hs.closing--
		close(hs.freed)
		hs.freed = make(chan struct{})
		hs.mu.Unlock()
		hs.log.Debug("redis: idle sharded subscription connection closed", "slot", slot)
	}()
}

// HashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its hash tag (the bytes between the first '{' and the next
// '}', if not empty), modulo 16384.
func HashSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
