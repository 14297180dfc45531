package pausetest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Backends the workload runs on (envBackend).
const (
	backendRedis    = "redis"    // backend/redis; the counter a hash written with FencedSet
	backendPostgres = "postgres" // backend/postgres; the counter a postgres.KV row in the same database
)

// store is what a process of the workload uses: the lock's backend and
// the counter next to it, on one server. Only openStore knows the
// backends apart.
type store struct {
	backend driver.Backend
	// read returns the counter, "0" if it was never written.
	read func(ctx context.Context, key string) (string, error)
	// fencedWrite writes through the guard, plainWrite ignores fences
	// (the negative control).
	fencedWrite func(ctx context.Context, key, value string, fence fencing.Token, holder string) error
	plainWrite  func(ctx context.Context, key, value string) error
	close       func()
}

// openStore connects to the server at addr (a redis-server's host:port,
// or a PostgreSQL URL whose tables exist).
func openStore(kind, addr string) (*store, error) {
	switch kind {
	case backendRedis:
		return openRedis(addr)
	case backendPostgres:
		return openPostgres(addr)
	}
	return nil, fmt.Errorf("pausetest: unknown backend %q", kind)
}

func openRedis(addr string) (*store, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	b, err := redis.New(c, redis.Options{})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &store{
		backend: b,
		read: func(ctx context.Context, key string) (string, error) {
			v, err := c.Do(ctx, c.B().Hget().Key(key).Field(redis.ValueField).Build()).ToString()
			if rueidis.IsRedisNil(err) {
				return "0", nil
			}
			return v, err
		},
		fencedWrite: b.FencedSet,
		plainWrite: func(ctx context.Context, key, value string) error {
			return c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue(redis.ValueField, value).Build()).Error()
		},
		close: func() { b.Close(); c.Close() },
	}, nil
}

func openPostgres(url string) (*store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	b, err := postgres.New(ctx, pool, postgres.Options{SkipCreate: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	kv, err := postgres.NewKV(ctx, pool, "", true)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &store{
		backend: b,
		read: func(ctx context.Context, key string) (string, error) {
			r, err := kv.Get(ctx, key)
			if err != nil || !r.Found {
				return "0", err
			}
			return r.Value, nil
		},
		fencedWrite: kv.Set,
		plainWrite: func(ctx context.Context, key, value string) error {
			_, err := pool.Exec(ctx, `INSERT INTO `+postgres.DefaultKVTable+` (key, value, fence, holder) VALUES ($1, $2, 1, 'plain')
				ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, []byte(key), []byte(value))
			return err
		},
		close: func() { b.Close(); pool.Close() },
	}, nil
}
