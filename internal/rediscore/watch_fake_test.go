package rediscore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// fakePubSub is a PubSub in memory: it records what the hub sends, and
// the test plays the server (messages, confirmations, lost connections).
// The real-server tests of the hub are in rediscoretest, run by both
// adapters; these check what a server cannot show on demand.
type fakePubSub struct {
	mu     sync.Mutex
	conns  []*fakeConn
	hold   chan struct{} // if not nil, a Subscribe waits for it (a late confirmation)
	events chan string   // "dial", "sub <channel>", "unsub <channel>", as they happen
}

func newFake(hold bool) *fakePubSub {
	ps := &fakePubSub{events: make(chan string, 1000)}
	if hold {
		ps.hold = make(chan struct{})
	}
	return ps
}

// await waits (at most 10 s) for the event want, skipping others.
func (p *fakePubSub) await(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-p.events:
			if e == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q within 10s", want)
		}
	}
}

type fakeConn struct {
	events    chan string
	onMessage func(channel, message string)
	errs      chan error
	ended     chan struct{}
	once      sync.Once
	hold      chan struct{}

	mu    sync.Mutex
	subs  map[string]int // SUBSCRIBEs confirmed, by channel
	unsub map[string]int // UNSUBSCRIBEs, by channel
}

func (p *fakePubSub) Dial(sharded bool, onMessage func(channel, message string)) (SubConn, <-chan error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &fakeConn{events: p.events, onMessage: onMessage, errs: make(chan error, 1), ended: make(chan struct{}), hold: p.hold,
		subs: make(map[string]int), unsub: make(map[string]int)}
	p.conns = append(p.conns, c)
	p.events <- "dial"
	return c, c.errs
}

func (p *fakePubSub) Wrap(op, key string, err error) error {
	return redisscript.Wrap(op, key, err, false, false)
}

// dials returns the connections dialed so far.
func (p *fakePubSub) dials() []*fakeConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*fakeConn(nil), p.conns...)
}

func (c *fakeConn) Subscribe(ctx context.Context, channel string) error {
	if c.hold != nil {
		select {
		case <-c.hold:
		case <-c.ended:
			return ErrConnGone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-c.ended:
		return ErrConnGone
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs[channel]++
	c.events <- "sub " + channel
	return nil
}

func (c *fakeConn) Unsubscribe(ctx context.Context, channel string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsub[channel]++
	c.events <- "unsub " + channel
	return nil
}

func (c *fakeConn) Close() { c.end(nil) }

// end ends the connection; a non-nil err is a lost connection.
func (c *fakeConn) end(err error) {
	c.once.Do(func() {
		close(c.ended)
		if err != nil {
			c.errs <- err
		}
		close(c.errs)
	})
}

func (c *fakeConn) counts(channel string) (subs, unsubs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[channel], c.unsub[channel]
}
