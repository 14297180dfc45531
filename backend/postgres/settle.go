package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// settleTimeout bounds how long a statement cancelled by its caller's
// context may take to end on the server before its connection is closed.
const settleTimeout = 2 * time.Second

// settled runs q on a connection of the pool with a context that ctx does
// not cancel, and returns promptly once ctx is done (the driver contract),
// with an error wrapping ctx.Err(). The statement itself may still be in
// flight then (queued in PgBouncer, running, or its reply late): it is
// asked to stop (a CancelRequest, which PgBouncer forwards to the server
// connection running it) and left to settle in the background, up to
// settleTimeout, on its own connection. Until it has, the same owner's
// Release of the same key waits for it ([Backend.awaitSettled]): the
// Locker's clean-up Release after an unknown outcome must not run before
// an Acquire still in flight, which would then be applied after it and
// hold the key for its whole TTL.
func (b *Backend) settled(ctx context.Context, key, owner string, q func(context.Context, *pgxpool.Conn) error) error {
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	done := make(chan error, 1)
	go func() { done <- q(qctx, c) }()
	select {
	case err := <-done:
		cancel()
		c.Release()
		return err
	case <-ctx.Done():
	}
	settled := b.unsettled(key, owner)
	go func() {
		_ = c.Conn().PgConn().CancelRequest(qctx)
		<-done // its outcome is for no one: the Release that follows waits for it
		cancel()
		c.Release()
		b.settle(key, owner, settled)
	}()
	return fmt.Errorf("%w (the statement is cancelled and settles in the background; a Release of the key waits for it)", ctx.Err())
}

// inflightKey names an Acquire of key by owner in Backend.inflight.
func inflightKey(key, owner string) string { return key + "\x00" + owner }

// unsettled records an Acquire of key by owner still in flight and returns
// the channel that settle closes.
func (b *Backend) unsettled(key, owner string) chan struct{} {
	ch := make(chan struct{})
	b.mu.Lock()
	if b.inflight == nil {
		b.inflight = map[string]chan struct{}{}
	}
	b.inflight[inflightKey(key, owner)] = ch
	b.mu.Unlock()
	return ch
}

// settle ends what unsettled recorded.
func (b *Backend) settle(key, owner string, ch chan struct{}) {
	b.mu.Lock()
	if b.inflight[inflightKey(key, owner)] == ch {
		delete(b.inflight, inflightKey(key, owner))
	}
	b.mu.Unlock()
	close(ch)
}

// awaitSettled waits until no Acquire of key by owner is in flight on this
// backend, or ctx is done.
func (b *Backend) awaitSettled(ctx context.Context, key, owner string) error {
	b.mu.Lock()
	ch := b.inflight[inflightKey(key, owner)]
	b.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("postgres: %q: %w (an Acquire of the key by this owner is still settling)", key, ctx.Err())
	}
}
