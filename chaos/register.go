package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// register is the shared state the workers increment: it lives where a
// user's state would, behind the backend's fencing guard.
//
// Claim raises the guard's fence record to the lease's fence without
// changing the value. A worker claims before it reads: a fenced write alone
// does not make read-modify-write safe (holder A reads, loses its lease,
// holder B reads the same value, A's write is still accepted because no
// newer fence reached the guard yet, and B's write then loses A's
// increment); once B has claimed, A's write is rejected.
type register interface {
	Claim(ctx context.Context, fence fencing.Token, holder string) error
	Read(ctx context.Context) (int64, error)
	Write(ctx context.Context, v int64, fence fencing.Token, holder string) error
}

// redisRegister is a Redis hash written with FencedSet and FencedHSet. With
// bypass, claims and writes are plain HSETs: the negative control.
type redisRegister struct {
	b      *redis.Backend
	c      rueidis.Client
	key    string
	bypass bool
}

// claimField is the hash field a claim writes (the holder id), so that a
// claim is a real write through the guard.
const claimField = "claim"

func (r *redisRegister) Claim(ctx context.Context, fence fencing.Token, holder string) error {
	if r.bypass {
		return r.c.Do(ctx, r.c.B().Hset().Key(r.key).FieldValue().FieldValue(claimField, holder).Build()).Error()
	}
	return r.b.FencedHSet(ctx, r.key, map[string]string{claimField: holder}, fence, holder)
}

func (r *redisRegister) Read(ctx context.Context) (int64, error) {
	rec, err := r.b.FencedGet(ctx, r.key)
	return count(rec.Value, rec.Found, err)
}

func (r *redisRegister) Write(ctx context.Context, v int64, fence fencing.Token, holder string) error {
	s := strconv.FormatInt(v, 10)
	if r.bypass {
		return r.c.Do(ctx, r.c.B().Hset().Key(r.key).FieldValue().FieldValue(redis.ValueField, s).Build()).Error()
	}
	return r.b.FencedSet(ctx, r.key, s, fence, holder)
}

// sqlTable is the PostgreSQL table of the SQL register: one row per
// register, guarded by fencing.SQLTable.
var sqlTable = fencing.SQLTable{Table: "chaos_register"}

// sqlSchema creates sqlTable's table.
const sqlSchema = `CREATE TABLE IF NOT EXISTS chaos_register (
	key text PRIMARY KEY, value bigint NOT NULL DEFAULT 0,
	fence bigint NOT NULL DEFAULT 0, holder text NOT NULL DEFAULT '')`

// sqlRegister is a PostgreSQL row written with fencing.SQLTable. With
// bypass, claims do nothing and writes are plain UPDATEs.
type sqlRegister struct {
	db     *sql.DB
	key    string
	bypass bool
}

func (r *sqlRegister) Claim(ctx context.Context, fence fencing.Token, holder string) error {
	if r.bypass {
		return nil
	}
	cond, args, err := sqlTable.Where(fence, holder, 1)
	if err != nil {
		return err
	}
	// $1 and $2 serve both the SET and the condition.
	res, err := r.db.ExecContext(ctx, "UPDATE chaos_register SET fence = $1, holder = $2 WHERE key = $3 AND "+cond,
		append(args, r.key)...)
	if err != nil {
		return fmt.Errorf("chaos: sql claim: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("chaos: sql claim: %w", err)
	} else if n > 0 {
		return nil
	}
	return sqlTable.Stale(ctx, r.db, r.key, fence, holder)
}

func (r *sqlRegister) Read(ctx context.Context) (int64, error) {
	var v int64
	if err := r.db.QueryRowContext(ctx, "SELECT value FROM chaos_register WHERE key = $1", r.key).Scan(&v); err != nil {
		return 0, fmt.Errorf("chaos: sql read: %w", err)
	}
	return v, nil
}

func (r *sqlRegister) Write(ctx context.Context, v int64, fence fencing.Token, holder string) error {
	if r.bypass {
		_, err := r.db.ExecContext(ctx, "UPDATE chaos_register SET value = $1 WHERE key = $2", v, r.key)
		return err
	}
	return sqlTable.Set(ctx, r.db, r.key, v, fence, holder)
}

// etcdRegister is an etcd key written with FencedPut.
type etcdRegister struct {
	b   *etcd.Backend
	c   *clientv3.Client
	key string
}

// Claim writes only the key's fence record, under the condition FencedPut
// uses (backend/etcd/fenced.go): no record, a smaller fence, or the same
// record. The backend has no fence-only write, so this mirrors its record
// layout (Prefix+"fences/"+escaped key, "%020d holder"); were the layout to
// change, claims would stop guarding the register and the checker's (a)
// and (e) would fail, loudly.
func (r *etcdRegister) Claim(ctx context.Context, fence fencing.Token, holder string) error {
	fk := r.b.Options().KeyPrefix + "fences/" + url.PathEscape(r.key)
	rec := fmt.Sprintf("%020d %s", uint64(fence), holder)
	put := clientv3.OpPut(fk, rec)
	same := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(fk), "=", rec)}, []clientv3.Op{put}, nil)
	greater := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(fk), "<", rec[:20])}, []clientv3.Op{put}, []clientv3.Op{same})
	resp, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(fk), "=", 0)).Then(put).Else(greater).Commit()
	if err != nil {
		return fmt.Errorf("chaos: etcd claim: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	r2 := resp.Responses[0].GetResponseTxn()
	if r2.GetSucceeded() || r2.GetResponses()[0].GetResponseTxn().GetSucceeded() {
		return nil
	}
	return fmt.Errorf("chaos: etcd claim: %w", &fencing.StaleError{Token: fence, Holder: holder})
}

func (r *etcdRegister) Read(ctx context.Context) (int64, error) {
	rec, err := r.b.FencedGet(ctx, r.key)
	return count(rec.Value, rec.Found, err)
}

func (r *etcdRegister) Write(ctx context.Context, v int64, fence fencing.Token, holder string) error {
	return r.b.FencedPut(ctx, r.key, strconv.FormatInt(v, 10), fence, holder)
}

// count is the register's value read as value (found: the key exists;
// err: the read's error): 0 if the key does not exist yet.
func count(value string, found bool, err error) (int64, error) {
	if err != nil || !found {
		return 0, err
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("chaos: register holds %q: %w", value, err)
	}
	return n, nil
}
