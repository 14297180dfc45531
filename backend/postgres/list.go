package postgres

import (
	"context"
	"fmt"
)

// Keys returns, in byte order, up to limit lock keys that start with
// prefix and sort after after ("" to start at the first), from both
// tables: every key that was ever granted (held, free or expired) and
// still has a row. Each call is one statement reading at most 2*limit
// index entries, so an operator can page through millions of keys (pass
// the last key returned as after) without a long scan; [Backend.Inspect]
// then describes each key.
func (b *Backend) Keys(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	if err := b.usable(ctx); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, nil
	}
	// Keys with the prefix are the range [prefix, end): end is the prefix
	// with its last byte below 0xff incremented and what follows dropped,
	// nil (no bound) if there is none.
	var end []byte
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			end = append([]byte(prefix[:i]), prefix[i]+1)
			break
		}
	}
	where := `key >= $1 AND key > $2 AND ($3::bytea IS NULL OR key < $3)`
	q := fmt.Sprintf(`(SELECT key FROM %[1]s WHERE %[3]s ORDER BY key LIMIT $4)
UNION
(SELECT key FROM %[2]s WHERE %[3]s ORDER BY key LIMIT $4)
ORDER BY key LIMIT $4`, b.leases, b.fences, where)
	rows, err := b.pool.Query(ctx, q, []byte(prefix), []byte(after), end, limit)
	if err != nil {
		return nil, wrap("keys", err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			return nil, wrap("keys", err)
		}
		keys = append(keys, string(k))
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("keys", err)
	}
	return keys, nil
}
