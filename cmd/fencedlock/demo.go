//go:build unix

package main

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/demo"
	"github.com/fencedlock/fencedlock/driver"
)

const demoHeader = `Usage: fencedlock demo [flags]

Show, with real processes, why a lock needs a fencing token:

  1. worker A acquires the lock and checks that it holds it;
  2. the demo stops A with SIGSTOP (a GC pause, a VM stall) past its lease;
  3. the lease expires on the server; worker B acquires with a higher fence
     and writes to the fenced resource;
  4. the demo resumes A with SIGCONT; A writes with its old fence and the
     server REJECTS it; A's release deletes nothing (B still holds the lock).

With no backend flag the lock server is an embedded Redis (miniredis) on a
loopback port, whose key expiry the demo drives in real time. --redis or
--etcd runs the same against a real server.

The fenced resource lives on the same server as the lock, as it would in
your code: on Redis a hash written with (*redis.Backend).FencedSet, whose
script checks the fence and writes in one step; on etcd a key written with
(*etcd.Backend).FencedPut, one transaction. The workers write it directly;
the server alone decides from the fence in each write, and the demo reads
the result back (FencedGet) for its verdict. The demo deletes the resource
key when it starts (on etcd the fence record of an earlier run stays; it is
older than any fence of the new run) and leaves it at the end, to be looked at.
Owner tokens are never printed, only holder ids.

The exit code is 0 only if the outcome was the safe one; otherwise 1 (69 if
the server cannot be used). --no-fencing makes the workers write with a plain
HSET (Redis) or Put (etcd), which ignores fences, so A's late write
overwrites B's: the unsafe outcome, exit 1.
`

const demoFooter = `
Backends: the embedded Redis, unless --redis URL or --etcd ENDPOINTS names a server. demo reads
no FENCEDLOCK_REDIS or FENCEDLOCK_ETCD (nor the other backend variables): a variable set for the
other commands does not point the demo at that server. URL forms, TLS: fencedlock help backends.
` + `
Examples:
  go run ./cmd/fencedlock demo
  go run ./cmd/fencedlock demo --no-fencing    # the same pause without fencing: corrupted, exit 1
  fencedlock demo --redis redis://default:secret@127.0.0.1:6379 --ttl 2s
  fencedlock demo --etcd http://127.0.0.1:2379

` + demoExitCodes

type demoFlags struct {
	backend  backendConfig
	ttl      time.Duration
	key      string
	resource string
	unfenced bool
}

// workerCommand is the hidden subcommand the demo runs in its worker
// processes (demo.Worker). It is not part of the command-line interface.
const workerCommand = "__demo-worker"

// demo parses the flags and plays the scenario of package demo.
func (e *env) demo(ctx context.Context, args []string) int {
	var f demoFlags
	fs := e.newFlagSet("demo", demoHeader, demoFooter)
	addBackendFlags(fs, &f.backend)
	fs.DurationVar(&f.ttl, "ttl", time.Second, "the workers' lease `duration`; A is paused past it")
	fs.StringVar(&f.key, "lock", "demo:orders", "the lock `name` the workers compete for")
	fs.StringVar(&f.resource, "resource", "", "the `key` of the fenced resource on the server, outside the key prefix (default: the lock name + \":resource\")")
	fs.BoolVar(&f.unfenced, "no-fencing", false, "write the resource without the fence check (plain HSET / Put), to see the late write corrupt it (the demo then exits 1)")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 0 {
		return e.usageError("demo", "unexpected arguments %q", fs.Args())
	}
	if err := driver.ValidateKey(f.key); err != nil {
		return e.usageError("demo", "%v", err)
	}
	if f.resource == "" {
		f.resource = f.key + ":resource"
	}
	if f.ttl < 100*time.Millisecond || f.ttl > time.Minute {
		return e.usageError("demo", "--ttl %v out of range [100ms, 1m]", f.ttl)
	}
	c := f.backend
	if c.postgresURL != "" {
		return e.usageError("demo", "--postgres: the demo runs on Redis or etcd only (its fenced resource is a Redis hash or an etcd key); see docs/postgres.md for the same story on PostgreSQL")
	}
	embedded := c.redisURL == "" && c.etcd == ""
	if embedded && (c.cacert != "" || c.cert != "" || c.key != "" || c.user != "" || c.password != "") {
		return e.usageError("demo", "--tls-ca, --tls-cert, --tls-key, --user and --password need --etcd ENDPOINTS")
	}
	code, err := demo.Run(ctx, demo.Config{
		TTL:      f.ttl,
		Lock:     f.key,
		Resource: f.resource,
		Unfenced: f.unfenced,
		Embedded: embedded,
		Server: func(embeddedURL string) (demo.Server, error) {
			c := f.backend
			if embeddedURL != "" {
				c.redisURL = embeddedURL
			}
			// Only flags choose the demo's server: never a stray environment.
			if err := c.resolve(func(string) string { return "" }); err != nil {
				return demo.Server{}, err
			}
			return demoServer(c), nil
		},
		Self:       e.self,
		WorkerArgs: []string{workerCommand},
		Stdout:     e.stdout,
		Stderr:     e.stderr,
	})
	if err != nil {
		return e.openError("demo", err)
	}
	return code
}

// worker runs a demo worker process; its server comes from the
// environment the demo gave it.
func (e *env) worker(ctx context.Context, args []string) int {
	server := func() (demo.Server, error) {
		var c backendConfig
		if err := c.resolve(e.getenv); err != nil {
			return demo.Server{}, err
		}
		return demoServer(c), nil
	}
	return demo.Worker(ctx, server, args, e.stdin, e.stdout, e.stderr)
}

// demoServer is the server c names, for package demo.
func demoServer(c backendConfig) demo.Server {
	s := demo.Server{Name: c.describe(), Env: c.environ()}
	if c.redisURL != "" {
		s.DialRedis = func() (rueidis.Client, *redisb.Backend, error) { return dialRedis(c) }
	} else {
		s.DialEtcd = func(ctx context.Context) (*clientv3.Client, *etcdb.Backend, error) { return dialEtcd(ctx, c) }
	}
	return s
}

// environ returns the FENCEDLOCK_ variables that name the server c, the
// inverse of resolve.
func (c *backendConfig) environ() []string {
	var out []string
	add := func(name, v string) {
		if v != "" {
			out = append(out, name+"="+v)
		}
	}
	add("FENCEDLOCK_REDIS", c.redisURL)
	add("FENCEDLOCK_ETCD", c.etcd)
	add("FENCEDLOCK_ETCD_CACERT", c.cacert)
	add("FENCEDLOCK_ETCD_CERT", c.cert)
	add("FENCEDLOCK_ETCD_KEY", c.key)
	add("FENCEDLOCK_ETCD_USER", c.user)
	add("FENCEDLOCK_ETCD_PASSWORD", c.password)
	add("FENCEDLOCK_KEY_PREFIX", c.keyPrefix)
	return out
}
