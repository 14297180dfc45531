package postgres

import (
	"context"
	_ "embed" // the schema file
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencedlock/fencedlock/fencing"
)

//go:embed kv.sql
var kvSQL string

// DefaultKVTable is the table of [NewKV] when none is named.
const DefaultKVTable = "fencedlock_kv"

// Querier is what [KV] needs of a database handle: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx implement it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// KV is a [fencing.Store] on a table of the database (kv.sql): each key
// holds a value and its fence record, and every write applies the fencing
// rule in the statement (or transaction) that writes. Bound to a caller's
// transaction with [KV.In], its writes commit with that transaction, so a
// lock check ([Backend.CheckTx]), the fence check and the write commit
// together or not at all.
type KV struct {
	db    Querier
	table string // quoted
}

var _ fencing.Store = (*KV)(nil)

// NewKV returns a KV on table ("" means DefaultKVTable) through db, and
// creates the table if it does not exist unless skipCreate is set.
func NewKV(ctx context.Context, db Querier, table string, skipCreate bool) (*KV, error) {
	q, err := ident(orDefault(table, DefaultKVTable))
	if err != nil {
		return nil, err
	}
	if !skipCreate {
		if _, err := db.Exec(ctx, strings.ReplaceAll(kvSQL, `"`+DefaultKVTable+`"`, q)); err != nil {
			return nil, fmt.Errorf("postgres: creating the kv table: %w", err)
		}
	}
	return &KV{db: db, table: q}, nil
}

// In returns the same KV with its statements sent in tx: its writes
// commit or roll back with tx (Update uses a savepoint).
func (k *KV) In(tx pgx.Tx) *KV { return &KV{db: tx, table: k.table} }

func checkWrite(token fencing.Token, holder string) error {
	if token == 0 {
		return fmt.Errorf("postgres: zero token: %w", fencing.ErrInvalidToken)
	}
	if uint64(token) > math.MaxInt64 {
		return fmt.Errorf("postgres: token %d does not fit a bigint: %w", token, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("postgres: empty holder id: %w", fencing.ErrInvalidToken)
	}
	return nil
}

// Get implements [fencing.Store].
func (k *KV) Get(ctx context.Context, key string) (fencing.Record, error) {
	return k.get(ctx, k.db, key, "")
}

func (k *KV) get(ctx context.Context, db Querier, key, lock string) (fencing.Record, error) {
	var (
		r     fencing.Record
		value []byte
		fence int64
	)
	err := db.QueryRow(ctx, fmt.Sprintf(`SELECT value, fence, holder FROM %s WHERE key = $1 %s`, k.table, lock), []byte(key)).
		Scan(&value, &fence, &r.Holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return fencing.Record{}, nil
	}
	if err != nil {
		return fencing.Record{}, fmt.Errorf("postgres: kv get: %w", err)
	}
	r.Value, r.Found, r.Fence = string(value), true, fencing.Token(fence)
	return r, nil
}

// Set implements [fencing.Store]: one INSERT ... ON CONFLICT DO UPDATE
// whose WHERE clause is the fencing rule. A rejection costs a second
// statement to read the accepted fence for the StaleError.
func (k *KV) Set(ctx context.Context, key, value string, token fencing.Token, holder string) error {
	return k.guarded(ctx, "kv set", `INSERT INTO %s AS k (key, value, fence, holder) VALUES ($1, $4, $2, $3)
	ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, fence = EXCLUDED.fence, holder = EXCLUDED.holder
		WHERE `+kvRule, key, token, holder, []byte(value))
}

// FenceBarrier raises the fence record of key to token from holder
// without changing its value, if the fencing rule accepts it: one
// statement. After it, a write with a smaller token, or the same token
// from another holder, is rejected. An operator writes ForceResult.After
// of [Backend.ForceRelease] this way, so that the old holder's next write
// to key is refused. An absent key is created with an empty value.
// A rejection wraps a *[fencing.StaleError].
func (k *KV) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	return k.guarded(ctx, "kv fence barrier", `INSERT INTO %s AS k (key, value, fence, holder) VALUES ($1, '', $2, $3)
	ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, holder = EXCLUDED.holder
		WHERE `+kvRule, key, token, holder)
}

// kvRule is the fencing rule in an upsert's WHERE clause: the stored
// record k against the one written (EXCLUDED).
const kvRule = `k.fence < EXCLUDED.fence OR (k.fence = EXCLUDED.fence AND k.holder = EXCLUDED.holder)`

// guarded runs q (its %s the table; $1 key, $2 token, $3 holder, then
// more) until it writes a row or the fencing rule rejects token: when it
// writes nothing, the row is read and checked, and if the row changed
// meanwhile and now accepts token, q runs again.
func (k *KV) guarded(ctx context.Context, what, q string, key string, token fencing.Token, holder string, more ...any) error {
	if err := checkWrite(token, holder); err != nil {
		return err
	}
	q = fmt.Sprintf(q, k.table)
	args := append([]any{[]byte(key), int64(token), holder}, more...)
	for {
		tag, err := k.db.Exec(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		cur, err := k.get(ctx, k.db, key, "")
		if err != nil {
			return err
		}
		if err := fencing.Check(cur.Fence, cur.Holder, token, holder); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("postgres: %s: %w", what, err)
		}
	}
}

// Update implements [fencing.Store] in one transaction (a savepoint when
// the KV is bound to a transaction): it locks the row, applies the rule,
// calls fn and writes its result. A key absent when read is inserted only
// if still absent; if another write created it meanwhile, Update reads
// again and calls fn again.
func (k *KV) Update(ctx context.Context, key string, token fencing.Token, holder string, fn func(cur fencing.Record) (string, error)) error {
	if err := checkWrite(token, holder); err != nil {
		return err
	}
	for {
		again := false
		err := pgx.BeginFunc(ctx, k.db, func(tx pgx.Tx) error {
			cur, err := k.get(ctx, tx, key, "FOR UPDATE")
			if err != nil {
				return err
			}
			if err := fencing.Check(cur.Fence, cur.Holder, token, holder); err != nil {
				return err
			}
			v, err := fn(cur)
			if err != nil {
				return err
			}
			q := fmt.Sprintf(`UPDATE %s SET value = $2, fence = $3, holder = $4 WHERE key = $1`, k.table)
			if !cur.Found {
				q = fmt.Sprintf(`INSERT INTO %s (key, value, fence, holder) VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING`, k.table)
			}
			tag, err := tx.Exec(ctx, q, []byte(key), []byte(v), int64(token), holder)
			if err != nil {
				return fmt.Errorf("postgres: kv update: %w", err)
			}
			again = tag.RowsAffected() == 0
			return nil
		})
		if err != nil || !again {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("postgres: kv update: %w", err)
		}
	}
}
