package chaos

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// LockPostgres is backend/postgres (New: waiters poll; with Fair,
// postgres.Fair: FIFO waiters) on one PostgreSQL server, reached through
// the worker's fault proxy.
const LockPostgres = "postgres"

// RegisterPostgresKV is a row of postgres.KV in the lock's database:
// FenceBarrier claims, Get reads, Set writes.
const RegisterPostgresKV = "pgkv"

// openPostgres makes the PostgreSQL backend and register on one pool,
// passing what is to be closed to add. The parent has created the tables.
// The pool dials lazily: a fault already in effect fails operations, not
// the worker.
func openPostgres(cfg WorkerConfig, add func(func())) (driver.Backend, register, error) {
	if cfg.Register != RegisterPostgresKV || cfg.Broken != "" {
		return nil, nil, fmt.Errorf("postgres: register %q, broken %q: not supported", cfg.Register, cfg.Broken)
	}
	pc, err := pgxpool.ParseConfig(cfg.PostgresURL)
	if err != nil {
		return nil, nil, err
	}
	pc.MaxConns = 4
	pc.ConnConfig.ConnectTimeout = cfg.TTL
	ctx, cancel := context.WithTimeout(context.Background(), cfg.MaxTime)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	add(pool.Close)
	b, err := postgres.New(ctx, pool, postgres.Options{SkipCreate: true})
	if err != nil {
		return nil, nil, err
	}
	add(func() { b.Close() })
	var lock driver.Backend = b
	if cfg.Fair {
		if lock, err = postgres.NewFair(ctx, b, nil); err != nil {
			return nil, nil, err
		}
	}
	kv, err := postgres.NewKV(ctx, pool, "", true)
	if err != nil {
		return nil, nil, err
	}
	return lock, &pgRegister{kv: kv, pool: pool, key: cfg.RegKey, bypass: cfg.Bypass}, nil
}

// pgRegister is a row of postgres.KV. With bypass, claims do nothing and
// writes are plain upserts that ignore fences: the negative control.
type pgRegister struct {
	kv     *postgres.KV
	pool   *pgxpool.Pool
	key    string
	bypass bool
}

func (r *pgRegister) Claim(ctx context.Context, fence fencing.Token, holder string) error {
	if r.bypass {
		return nil
	}
	return r.kv.FenceBarrier(ctx, r.key, fence, holder)
}

func (r *pgRegister) Read(ctx context.Context) (int64, error) {
	rec, err := r.kv.Get(ctx, r.key)
	// A row only claimed so far (FenceBarrier) holds an empty value.
	return count(rec.Value, rec.Found && rec.Value != "", err)
}

func (r *pgRegister) Write(ctx context.Context, v int64, fence fencing.Token, holder string) error {
	s := strconv.FormatInt(v, 10)
	if r.bypass {
		_, err := r.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (key, value, fence, holder) VALUES ($1, $2, 1, 'bypass')
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, postgres.DefaultKVTable), []byte(r.key), []byte(s))
		return err
	}
	return r.kv.Set(ctx, r.key, s, fence, holder)
}
