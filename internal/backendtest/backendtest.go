// Package backendtest opens the backends the tests of the packages built
// on a Backend (election, rwlock, semaphore) run on: each Redis client on
// a real redis-server, and the benchmarks' stores.
package backendtest

import (
	"testing"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/backend/goredis"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// RedisClient opens a Backend of one Redis client on a server, as a
// process of its own would (a client of its own), with its fenced store.
type RedisClient struct {
	Name string
	Open func(t *testing.T, srv *testserver.Redis) (driver.Backend, fencing.Store)
}

// RedisClients are both Redis clients: rueidis (backend/redis) and
// go-redis (backend/goredis).
var RedisClients = []RedisClient{
	{"rueidis", func(t *testing.T, srv *testserver.Redis) (driver.Backend, fencing.Store) {
		b, err := redis.New(srv.Client(t, nil), redis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b, redis.NewStore(b)
	}},
	{"goredis", func(t *testing.T, srv *testserver.Redis) (driver.Backend, fencing.Store) {
		c := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr})
		t.Cleanup(func() { c.Close() })
		b, err := goredis.New(c, goredis.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b, goredis.NewStore(b)
	}},
}

// BenchBackend is a store of the benchmarks.
type BenchBackend struct {
	Name string
	New  func(b *testing.B) driver.Backend
}

// BenchBackends are the stores of the benchmarks: the in-memory one (the
// library's own cost) and a real redis-server on 127.0.0.1.
var BenchBackends = []BenchBackend{
	{"memory", func(*testing.B) driver.Backend { return memory.New() }},
	{"redis", func(b *testing.B) driver.Backend {
		srv := testserver.StartRedis(b)
		be, err := redis.New(srv.Client(b, nil), redis.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return be
	}},
}

// EachBench runs bench as a sub-benchmark on each of [BenchBackends],
// with a backend closed when it returns.
func EachBench(b *testing.B, bench func(b *testing.B, be driver.Backend)) {
	for _, bb := range BenchBackends {
		b.Run(bb.Name, func(b *testing.B) {
			be := bb.New(b)
			defer be.Close()
			bench(b, be)
		})
	}
}
