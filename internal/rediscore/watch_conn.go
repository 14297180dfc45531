package rediscore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// onMessage runs on the client's receiving goroutine: it only signals
// watchers. A hand-off message (release.lua: "granted <id> <fence>") wakes
// the waiter it names, if it is watching here, and no one else: the lock
// is not free. Any other message wakes every watcher of the channel.
func (h *hub) onMessage(channel, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.chans[channel]
	if cs == nil {
		return
	}
	if rest, ok := strings.CutPrefix(message, redisnames.GrantedPrefix); ok {
		id, f, _ := strings.Cut(rest, " ")
		if w := cs.byID[id]; w != nil {
			if fence, err := strconv.ParseUint(f, 10, 64); err == nil && fence > 0 {
				w.fence.Store(fence)
			}
			w.wake()
		}
		return
	}
	cs.wakeLocked()
}

func (w *Watcher) wake() {
	select {
	case w.c <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (cs *chanState) wakeLocked() {
	for w := range cs.watchers {
		w.wake()
	}
}

// monitor waits for the end of conn. If conn was lost while the hub is
// open, it wakes every watcher (a release may have been missed), closes
// conn and, if conn had worked, subscribes the watched channels again on a
// new connection. A connection that never worked triggers nothing, so a
// down server cannot make this spin.
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
	conn.c.Close()
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
// background (a fair-queue channel after lingering).
func (h *hub) unwatch(cs *chanState, w *Watcher) {
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

// unsubscribe sends the UNSUBSCRIBE of an unwatched channel, if it is (or
// may be) subscribed on the live connection, and forgets the channel.
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
		err = conn.c.Unsubscribe(ctx, cs.name)
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
// reports ErrClosed. A watch waiting for its confirmation returns
// ErrClosed.
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
		// Closing the connection ends its monitor (its channel is
		// closed) and any SUBSCRIBE waiting on it.
		conn.c.Close()
	}
	h.wg.Wait()
}
