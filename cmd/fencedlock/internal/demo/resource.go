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

// resource is the resource key on the demo's server, with the
// connection that writes it.
type resource interface {
	// write writes value with a lease's fence and holder id: through the
	// fenced helper, or plainly if the resource was opened unfenced. A
	// stale write returns an error wrapping fencing.ErrStale.
	write(ctx context.Context, value string, fence fencing.Token, holder string) error
	// read returns the value and the fence record kept with it.
	read(ctx context.Context) (resourceState, error)
	// reset deletes the value, so that a run starts from nothing.
	reset(ctx context.Context) error
	// describe names the resource and how it is written.
	describe() string
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
func open(ctx context.Context, s Server, key string, unfenced bool) (driver.Backend, resource, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if key == "" {
		return nil, nil, nil, fmt.Errorf("empty resource key: %w", driver.ErrInvalid)
	}
	if s.DialRedis != nil {
		client, b, err := s.DialRedis()
		if err != nil {
			return nil, nil, nil, err
		}
		closeAll := func() { _ = b.Close(); client.Close() }
		if err := outsidePrefix(key, b.Options().KeyPrefix); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		return b, &redisResource{b: b, c: client, key: key, unfenced: unfenced}, closeAll, nil
	}
	if s.DialEtcd == nil {
		return nil, nil, nil, fmt.Errorf("demo: no server to dial: %w", driver.ErrInvalid)
	}
	client, b, err := s.DialEtcd(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	closeAll := func() { _ = b.Close(); client.Close() }
	if err := outsidePrefix(key, b.Options().KeyPrefix); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return b, &etcdResource{b: b, c: client, key: key, unfenced: unfenced}, closeAll, nil
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

// redisResource is a Redis hash: FencedSet keeps the value in field
// redis.ValueField and the fence record in two more fields.
type redisResource struct {
	b        *redisb.Backend
	c        rueidis.Client
	key      string
	unfenced bool
}

func (r *redisResource) write(ctx context.Context, value string, fence fencing.Token, holder string) error {
	if r.unfenced {
		cmd := r.c.B().Hset().Key(r.key).FieldValue().FieldValue(redisb.ValueField, value).Build()
		if err := r.c.Do(ctx, cmd).Error(); err != nil {
			return fmt.Errorf("redis: hset %q: %w", r.key, err)
		}
		return nil
	}
	return r.b.FencedSet(ctx, r.key, value, fence, holder)
}

func (r *redisResource) read(ctx context.Context) (resourceState, error) {
	rec, err := r.b.FencedGet(ctx, r.key)
	return resourceState{value: rec.Value, ok: rec.Found, fence: rec.Fence, holder: rec.Holder}, err
}

func (r *redisResource) reset(ctx context.Context) error {
	// The fence record is in the hash: it goes too.
	if err := r.c.Do(ctx, r.c.B().Del().Key(r.key).Build()).Error(); err != nil {
		return fmt.Errorf("redis: del %q: %w", r.key, err)
	}
	return nil
}

func (r *redisResource) describe() string {
	if r.unfenced {
		return fmt.Sprintf("Redis hash %q on the lock's server, written with a plain HSET (--no-fencing: every write applies, whatever its fence)", r.key)
	}
	return fmt.Sprintf("Redis hash %q on the lock's server, written with FencedSet (one script checks the fence and writes)", r.key)
}

// etcdResource is an etcd key: FencedPut keeps its fence record under the
// backend's prefix.
type etcdResource struct {
	b        *etcdb.Backend
	c        *clientv3.Client
	key      string
	unfenced bool
}

func (r *etcdResource) write(ctx context.Context, value string, fence fencing.Token, holder string) error {
	if r.unfenced {
		if _, err := r.c.Put(ctx, r.key, value); err != nil {
			return fmt.Errorf("etcd: put %q: %w", r.key, err)
		}
		return nil
	}
	return r.b.FencedPut(ctx, r.key, value, fence, holder)
}

func (r *etcdResource) read(ctx context.Context) (resourceState, error) {
	rec, err := r.b.FencedGet(ctx, r.key)
	return resourceState{value: rec.Value, ok: rec.Found, fence: rec.Fence, holder: rec.Holder}, err
}

func (r *etcdResource) reset(ctx context.Context) error {
	// The fence record of an earlier run stays (the backend owns it); it
	// holds an older revision than any fence of this run, so it rejects
	// nothing this run writes.
	if _, err := r.c.Delete(ctx, r.key); err != nil {
		return fmt.Errorf("etcd: delete %q: %w", r.key, err)
	}
	return nil
}

func (r *etcdResource) describe() string {
	if r.unfenced {
		return fmt.Sprintf("etcd key %q on the lock's cluster, written with a plain Put (--no-fencing: every write applies, whatever its fence)", r.key)
	}
	return fmt.Sprintf("etcd key %q on the lock's cluster, written with FencedPut (one Txn checks the fence and writes)", r.key)
}
