package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/redis/go-redis/v9"
)

// pingInterval is how long the receive loop of a subscription connection
// waits for a message before it PINGs the connection, so that a dead
// connection is noticed (the hub then wakes its watchers: a release may
// have been missed, and subscribes them again on a new connection).
const pingInterval = 15 * time.Second

// pubsub is the go-redis side of [rediscore.PubSub]: a subscription
// connection is a go-redis PubSub, received from by one goroutine. The
// wake-up hub itself is rediscore.Hubs.
type pubsub struct{ c redis.UniversalClient }

// Dial implements [rediscore.PubSub]. The PubSub's connection is opened
// by its first SUBSCRIBE (a cluster client opens it on the node serving
// that channel's slot, which SSUBSCRIBE needs), after which the receive
// loop starts.
func (p pubsub) Dial(sharded bool, onMessage func(channel, message string)) (rediscore.SubConn, <-chan error) {
	s := &subConn{sharded: sharded, onMessage: onMessage, errs: make(chan error, 1), ended: make(chan struct{}),
		loopDone: make(chan struct{}), pending: make(map[string][]chan struct{})}
	if sharded {
		s.ps = p.c.SSubscribe(context.Background())
	} else {
		s.ps = p.c.Subscribe(context.Background())
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, s.errs
}

// Wrap implements [rediscore.PubSub].
func (p pubsub) Wrap(op, key string, err error) error { return wrap(op, key, err) }

// subConn is one subscription connection. go-redis's own reconnection
// is not used: any error of the connection ends it (end), and the hub
// makes a new one.
type subConn struct {
	ps        *redis.PubSub
	sharded   bool
	onMessage func(channel, message string)
	ctx       context.Context // of the receive loop; canceled by Close
	cancel    context.CancelFunc
	errs      chan error    // why it ended; closed by end
	ended     chan struct{} // closed by end
	loopDone  chan struct{} // closed when the receive loop returns

	mu      sync.Mutex
	done    bool                       // end was called
	err     error                      // the error end was called with
	started bool                       // the receive loop was started
	pending map[string][]chan struct{} // SUBSCRIBEs sent, by channel, in order, not yet confirmed
}

// Subscribe implements [rediscore.SubConn]: go-redis sends the SUBSCRIBE
// and returns; its confirmation reaches the receive loop, which closes
// the waiting SUBSCRIBE's channel (in the order they were sent, as the
// server confirms them).
func (s *subConn) Subscribe(ctx context.Context, channel string) error {
	confirmed := make(chan struct{})
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return s.gone()
	}
	s.pending[channel] = append(s.pending[channel], confirmed)
	s.mu.Unlock()
	var err error
	if s.sharded {
		err = s.ps.SSubscribe(ctx, channel)
	} else {
		err = s.ps.Subscribe(ctx, channel)
	}
	if err != nil {
		s.end(err)
		return err
	}
	s.start()
	select {
	case <-confirmed:
		return nil
	case <-s.ended:
		return s.gone()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unsubscribe implements [rediscore.SubConn].
func (s *subConn) Unsubscribe(ctx context.Context, channel string) error {
	select {
	case <-s.ended:
		return s.gone()
	default:
	}
	if s.sharded {
		return s.ps.SUnsubscribe(ctx, channel)
	}
	return s.ps.Unsubscribe(ctx, channel)
}

// Close implements [rediscore.SubConn]: closing the PubSub closes its
// connection, without a round trip.
func (s *subConn) Close() {
	s.end(nil)
	s.cancel()
	_ = s.ps.Close()
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		<-s.loopDone
	}
}

// start starts the receive loop, once, unless the connection has ended.
func (s *subConn) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && !s.done {
		s.started = true
		go s.loop()
	}
}

// end ends the connection, once: pending SUBSCRIBEs fail, and err (if
// not nil) is sent to the hub's monitor.
func (s *subConn) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done, s.err = true, err
	s.pending = nil
	close(s.ended)
	if err != nil {
		s.errs <- err
	}
	close(s.errs)
}

// gone is the error of a call on an ended connection: ErrConnGone, and
// why it ended, if it was lost.
func (s *subConn) gone() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("%w: %w", rediscore.ErrConnGone, s.err)
	}
	return rediscore.ErrConnGone
}

// loop receives from the PubSub until an error or Close.
func (s *subConn) loop() {
	defer close(s.loopDone)
	for s.ctx.Err() == nil {
		msg, err := s.ps.ReceiveTimeout(s.ctx, pingInterval)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && s.ps.Ping(s.ctx) == nil {
				continue // quiet, and alive
			}
			s.end(fmt.Errorf("receive: %w", err))
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			s.onMessage(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				s.confirmed(m.Channel)
			}
		}
	}
}

// confirmed ends the wait of the oldest SUBSCRIBE of channel.
func (s *subConn) confirmed(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.pending[channel]; len(q) > 0 {
		close(q[0])
		if len(q) == 1 {
			delete(s.pending, channel)
		} else {
			s.pending[channel] = q[1:]
		}
	}
}

// Watch implements [driver.Notifier]: the returned channel receives a
// value when the release script publishes on key's channel (and when the
// subscription connection is lost, since a release may have been missed).
// All watches share one subscription connection (with
// Options.ShardedPubSub, one per hash slot watched, at most
// Options.MaxShardedConns: beyond, a Watch waits for the connection of a
// slot no longer watched, or fails and the Locker falls back to the
// holder's TTL hint), with one SUBSCRIBE per channel. The subscription is
// confirmed by the server before Watch returns. stop must be called once.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return b.hubs.Notify(ctx, key, b.Channel(key))
}
