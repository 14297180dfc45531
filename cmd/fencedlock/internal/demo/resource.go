//go:build unix

package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The demo's fenced resource lives on the lock server itself, where users
// keep theirs: on Redis a hash written with (*redis.Backend).FencedSet,
// whose script checks the fence and writes in one step; on etcd a key
// written with (*etcd.Backend).FencedPut, one Txn. The server decides,
// from the fence and holder id in each write; the demo only reads the
// result back. With --no-fencing the workers write with a plain HSET or
// Put, as code that ignores the fence would.

// resource is the resource key on the demo's server, on the fenced store
// of the lock's connection.
type resource struct {
	store    fencing.Store
	key      string
	unfenced bool
	// plain writes value without the fence check (--no-fencing), as code
	// that ignores the fence would.
	plain func(ctx context.Context, value string) error
	// del deletes the value.
	del func(ctx context.Context) error
	// what names the key and its server; fencedHow and plainHow how a
	// write goes through the store or without it.
	what, fencedHow, plainHow string
}

// write writes value with a lease's fence and holder id: through the
// fenced store, or plainly if the resource was opened unfenced. A stale
// write returns an error wrapping fencing.ErrStale.
func (r *resource) write(ctx context.Context, value string, fence fencing.Token, holder string) error {
	if r.unfenced {
		return r.plain(ctx, value)
	}
	return r.store.Set(ctx, r.key, value, fence, holder)
}

// read returns the value and the fence record kept with it.
func (r *resource) read(ctx context.Context) (resourceState, error) {
	rec, err := r.store.Get(ctx, r.key)
	return resourceState{value: rec.Value, ok: rec.Found, fence: rec.Fence, holder: rec.Holder}, err
}

// reset deletes the value, so that a run starts from nothing.
func (r *resource) reset(ctx context.Context) error { return r.del(ctx) }

// describe names the resource and how it is written.
func (r *resource) describe() string {
	if r.unfenced {
		return r.what + ", written with " + r.plainHow + " (--no-fencing: every write applies, whatever its fence)"
	}
	return r.what + ", written with " + r.fencedHow
}

// resourceState is what a resource holds: its value (ok false if none) and
// the highest fence accepted for it with its holder id (0 and "" if none).
type resourceState struct {
	value  string
	ok     bool
	fence  fencing.Token
	holder string
}

// open connects to s and returns the lock backend, the resource at key
// on the same connection, and a function that closes both.
func open(ctx context.Context, s Server, key string, unfenced bool) (driver.Backend, *resource, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if key == "" {
		return nil, nil, nil, fmt.Errorf("empty resource key: %w", driver.ErrInvalid)
	}
	var (
		b        driver.Backend
		prefix   string
		res      *resource
		closeAll func()
	)
	switch {
	case s.DialRedis != nil:
		client, rb, err := s.DialRedis()
		if err != nil {
			return nil, nil, nil, err
		}
		b, prefix, res = rb, rb.Options().KeyPrefix, redisResource(rb, client, key, unfenced)
		closeAll = func() { _ = rb.Close(); client.Close() }
	case s.DialEtcd != nil:
		client, eb, err := s.DialEtcd(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		b, prefix, res = eb, eb.Options().KeyPrefix, etcdResource(eb, client, key, unfenced)
		closeAll = func() { _ = eb.Close(); client.Close() }
	default:
		return nil, nil, nil, fmt.Errorf("demo: no server to dial: %w", driver.ErrInvalid)
	}
	if err := outsidePrefix(key, prefix); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return b, res, closeAll, nil
}

// openTimeout bounds how long connecting to the server may take.
const openTimeout = 5 * time.Second

// outsidePrefix refuses a resource key among the backend's own keys,
// which the fenced helpers refuse too.
func outsidePrefix(key, prefix string) error {
	if strings.HasPrefix(key, prefix) {
		return fmt.Errorf("--resource %q lies inside the key prefix %q, where the locks live: %w", key, prefix, driver.ErrInvalid)
	}
	return nil
}

// redisResource is a Redis hash: the store keeps the value in field
// redis.ValueField and the fence record in two more fields, which go with
// the hash when it is deleted.
func redisResource(b *redisb.Backend, c rueidis.Client, key string, unfenced bool) *resource {
	do := func(ctx context.Context, op string, cmd rueidis.Completed) error {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			return fmt.Errorf("redis: %s %q: %w", op, key, err)
		}
		return nil
	}
	return &resource{
		store: redisb.NewStore(b), key: key, unfenced: unfenced,
		plain: func(ctx context.Context, value string) error {
			return do(ctx, "hset", c.B().Hset().Key(key).FieldValue().FieldValue(redisb.ValueField, value).Build())
		},
		del: func(ctx context.Context) error {
			return do(ctx, "del", c.B().Del().Key(key).Build())
		},
		what:      fmt.Sprintf("Redis hash %q on the lock's server", key),
		fencedHow: "FencedSet (one script checks the fence and writes)",
		plainHow:  "a plain HSET",
	}
}

// etcdResource is an etcd key: the store keeps its fence record under the
// backend's prefix. A reset leaves the record of an earlier run (the
// backend owns it); it holds an older revision than any fence of this run,
// so it rejects nothing this run writes.
func etcdResource(b *etcdb.Backend, c *clientv3.Client, key string, unfenced bool) *resource {
	return &resource{
		store: etcdb.NewFencedStore(b), key: key, unfenced: unfenced,
		plain: func(ctx context.Context, value string) error {
			if _, err := c.Put(ctx, key, value); err != nil {
				return fmt.Errorf("etcd: put %q: %w", key, err)
			}
			return nil
		},
		del: func(ctx context.Context) error {
			if _, err := c.Delete(ctx, key); err != nil {
				return fmt.Errorf("etcd: delete %q: %w", key, err)
			}
			return nil
		},
		what:      fmt.Sprintf("etcd key %q on the lock's cluster", key),
		fencedHow: "FencedPut (one Txn checks the fence and writes)",
		plainHow:  "a plain Put",
	}
}
