package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/redis/rueidis"
)

// pubsub is the rueidis side of [rediscore.PubSub]: a subscription
// connection is a dedicated client (Dedicate), whose pub/sub hooks deliver
// the messages. The wake-up hub itself is rediscore.Hubs.
type pubsub struct{ c rueidis.Client }

// Dial implements [rediscore.PubSub]. rueidis dials the dedicated
// connection with its first command (on a cluster, on the node serving
// that command's slot).
func (p pubsub) Dial(sharded bool, onMessage func(channel, message string)) (rediscore.SubConn, <-chan error) {
	dc, release := p.c.Dedicate()
	errs := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		onMessage(m.Channel, m.Message)
	}})
	return &subConn{dc: dc, release: release, sharded: sharded}, errs
}

// Wrap implements [rediscore.PubSub].
func (p pubsub) Wrap(op, key string, err error) error { return wrap(op, key, err) }

// subConn is one dedicated subscription connection.
type subConn struct {
	dc      rueidis.DedicatedClient
	release func()
	sharded bool
	once    sync.Once
}

// Subscribe implements [rediscore.SubConn]. rueidis completes a SUBSCRIBE
// when the server's confirmation arrives, so the subscription is in
// effect when Do returns nil.
func (s *subConn) Subscribe(ctx context.Context, channel string) error {
	cmd := s.dc.B().Subscribe().Channel(channel).Build()
	if s.sharded {
		cmd = s.dc.B().Ssubscribe().Channel(channel).Build()
	}
	return gone(s.dc.Do(ctx, cmd).Error())
}

// Unsubscribe implements [rediscore.SubConn].
func (s *subConn) Unsubscribe(ctx context.Context, channel string) error {
	cmd := s.dc.B().Unsubscribe().Channel(channel).Build()
	if s.sharded {
		cmd = s.dc.B().Sunsubscribe().Channel(channel).Build()
	}
	return gone(s.dc.Do(ctx, cmd).Error())
}

// Close implements [rediscore.SubConn]: zero hooks close the error
// channel; the connection goes back to rueidis's pool, which unsubscribes
// it.
func (s *subConn) Close() {
	s.once.Do(func() {
		s.dc.SetPubSubHooks(rueidis.PubSubHooks{})
		s.release()
	})
}

// gone marks the error of a dedicated client given back before the
// command was sent (the connection ended meanwhile).
func gone(err error) error {
	if errors.Is(err, rueidis.ErrDedicatedClientRecycled) {
		return fmt.Errorf("%w: %w", rediscore.ErrConnGone, err)
	}
	return err
}

// Watch implements [driver.Notifier]: the returned channel receives a
// value when the release script publishes on key's channel (and when the
// subscription connection is lost, since a release may have been missed).
// All watches of a Backend share one subscription connection, with one
// SUBSCRIBE per channel however many waiters watch it. The subscription is
// confirmed by the server before Watch returns. stop must be called once.
// With Options.ShardedPubSub, watches use SSUBSCRIBE on the node
// serving the key's slot, one connection per slot watched at the moment
// (at most Options.MaxShardedConns: beyond, a Watch waits for the
// connection of a slot no longer watched, or fails and the Locker falls
// back to the holder's TTL hint); a slot migrated away ends its sharded
// subscriptions on the server, after which waiters of that slot fall back
// to the holder's TTL hint until they watch again.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return b.hubs.Notify(ctx, key, b.Channel(key))
}
