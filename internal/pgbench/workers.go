package pgbench

import (
	"context"
	"hash/fnv"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
)

// contendedTTL is the lease of the contended workers: far longer than any
// hand-off, so no lock expires while it is held.
const contendedTTL = 10 * time.Second

// lockerWorker is a [Worker] on a Locker of its own over backend be
// (closed with the Locker when b ends).
func lockerWorker(b *testing.B, be driver.Backend) Worker {
	l, err := fencedlock.New(be, fencedlock.Options{TTL: contendedTTL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		ls, err := l.Acquire(ctx, key)
		if err != nil {
			return nil, err
		}
		return ls.Release, nil
	}
}

// PollingWorker is a fencedlock Locker on the Env's backend: a waiter
// retries with the Locker's backoff, hinted by the holder's remaining
// lease (the default, which works behind a transaction pooler).
func PollingWorker(b *testing.B, e *Env) Worker { return lockerWorker(b, e.Backend) }

// ListeningWorker is a fencedlock Locker on a [postgres.Listening] backend
// of its own (one LISTEN connection per worker, as per process): a waiter
// is woken by the release's NOTIFY.
func ListeningWorker(b *testing.B, e *Env) Worker { return lockerWorker(b, listening(b, e)) }

// listening opens a [postgres.Listening] on the Env's pool, closed when b
// ends.
func listening(b *testing.B, e *Env) *postgres.Listening {
	l, err := postgres.NewListening(context.Background(), e.Pool, postgres.Options{}, e.Server.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// FairWorker is a fencedlock Locker on the Env's [postgres.Fair]: FIFO
// waiters, polling.
func FairWorker(b *testing.B, e *Env) Worker { return lockerWorker(b, e.Fair) }

// FairListeningWorker is FairWorker woken by the release's NOTIFY (a
// [postgres.Listening] of its own as the Fair's notifier).
func FairListeningWorker(b *testing.B, e *Env) Worker {
	l := listening(b, e)
	f, err := postgres.NewFair(context.Background(), l.Backend, l)
	if err != nil {
		b.Fatal(err)
	}
	return lockerWorker(b, f)
}

// AdvisoryWorker holds one pooled connection for the whole benchmark and
// waits in pg_advisory_lock: the server queues the waiters and wakes the
// next one itself, the unfenced floor of a hand-off.
func AdvisoryWorker(b *testing.B, e *Env) Worker {
	ctx := context.Background()
	c, err := e.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Release)
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key))
		id := int64(h.Sum64())
		if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := c.Exec(ctx, `SELECT pg_advisory_unlock($1)`, id)
			return err
		}, nil
	}
}
