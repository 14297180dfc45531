package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/driver"
)

// Listening is a [Backend] that also wakes waiters on release
// ([driver.Notifier]): it LISTENs on the release channel on one dedicated
// connection of its own (not one of the pool's), opened on the first
// Watch. Releases are announced by every Backend, listening or not, on
// keys a listening waiter marked (see wake_until in schema.sql): while a
// Watch runs it keeps its key marked with one UPDATE a second.
//
// Use it only on a direct connection to PostgreSQL: behind a transaction
// pooler (PgBouncer pool_mode=transaction) LISTEN receives nothing, and
// waiters would wait for the holder's expiry hint instead (capped by the
// Locker's MaxRetryDelay). NewListening's listenConn can point the
// listener at the server directly while the pool goes through the pooler.
type Listening struct {
	*Backend
	cfg *pgx.ConnConfig

	mu       sync.Mutex
	started  bool
	stopped  bool
	cancel   context.CancelFunc
	done     chan struct{}
	watchers map[string]map[chan struct{}]struct{} // by payload
}

var _ driver.Notifier = (*Listening)(nil)

// NewListening is [New] with release wake-ups. listenConn is the
// connection string of the listener's connection; empty means the pool's
// own configuration.
func NewListening(ctx context.Context, pool *pgxpool.Pool, opts Options, listenConn string) (*Listening, error) {
	b, err := New(ctx, pool, opts)
	if err != nil {
		return nil, err
	}
	cfg := pool.Config().ConnConfig.Copy()
	if listenConn != "" {
		if cfg, err = pgx.ParseConfig(listenConn); err != nil {
			return nil, fmt.Errorf("postgres: listen connection string: %w: %w", driver.ErrInvalid, err)
		}
	}
	return &Listening{Backend: b, cfg: cfg, watchers: make(map[string]map[chan struct{}]struct{})}, nil
}

// Watch implements [driver.Notifier]. The first Watch opens the
// listener's connection and returns its error if it cannot; afterwards a
// lost connection is reopened in the background, and every watcher is
// woken once it listens again (a release meanwhile went unheard).
func (l *Listening) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := l.usable(ctx); err != nil {
		return nil, nil, err
	}
	if err := l.start(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	p := payload(key)
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil, nil, fmt.Errorf("postgres: %w", driver.ErrClosed)
	}
	if l.watchers[p] == nil {
		l.watchers[p] = make(map[chan struct{}]struct{})
	}
	l.watchers[p][ch] = struct{}{}
	l.mu.Unlock()
	// Mark the key watched before returning, so the caller's next attempt
	// comes after the mark (wake.go); a failed mark leaves this waiter to
	// its timers, as a lost notification would.
	done := make(chan struct{})
	_ = l.keepMarked(ctx, key, done)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.watchers[p], ch)
			if len(l.watchers[p]) == 0 {
				delete(l.watchers, p)
			}
		})
	}
	return ch, stop, nil
}

// start opens the listener on the first call.
func (l *Listening) start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return fmt.Errorf("postgres: %w", driver.ErrClosed)
	}
	if l.started {
		return nil
	}
	conn, err := l.listen(ctx)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l.started, l.cancel, l.done = true, cancel, make(chan struct{})
	go l.loop(lctx, conn)
	return nil
}

// listen opens a connection and LISTENs on the channel.
func (l *Listening) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: listener connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("postgres: LISTEN: %w", err)
	}
	return conn, nil
}

// loop delivers notifications until ctx ends, reopening a lost connection
// with a capped backoff.
func (l *Listening) loop(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	backoff := 10 * time.Millisecond
	for {
		if conn == nil {
			c, err := l.listen(ctx)
			if err != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			conn, backoff = c, 10*time.Millisecond
			l.wake("") // releases while not listening went unheard
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.wake("")
			continue
		}
		l.wake(n.Payload)
	}
}

// wake signals the watchers of payload p, or every watcher if p is "".
func (l *Listening) wake(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, set := range l.watchers {
		if p != "" && key != p {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Close closes the listener's connection and the backend. It is
// idempotent.
func (l *Listening) Close() error {
	l.mu.Lock()
	l.stopped = true
	cancel, done := l.cancel, l.done
	l.cancel = nil
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	err := l.Backend.Close()
	if errors.Is(err, driver.ErrClosed) {
		return nil
	}
	return err
}
