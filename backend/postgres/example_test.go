package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/postgres"
)

// Example takes a lock and writes a row under its fence in one
// transaction: the lock check, the fence check and the write commit
// together or not at all. (Compiled, not run: it needs a server.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	b, err := postgres.New(ctx, pool, postgres.Options{}) // polling waiters: safe behind PgBouncer
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	kv, err := postgres.NewKV(ctx, pool, "", false)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := fencedlock.New(b, fencedlock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := b.CheckTx(ctx, tx, lease.Key(), lease.Fence()); err != nil {
			return err
		}
		return kv.In(tx).Set(ctx, "orders/42", "shipped", lease.Fence(), lease.Holder())
	})
	if err != nil {
		log.Fatal(err)
	}
}
