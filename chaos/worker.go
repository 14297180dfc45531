package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	_ "github.com/lib/pq" // the PostgreSQL driver of the SQL register
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WorkerEnv is the environment variable that turns a re-executed test
// binary into a worker: it holds the worker's [WorkerConfig] as JSON.
const WorkerEnv = "FENCEDLOCK_CHAOS_WORKER"

// Registers a worker can increment.
const (
	RegisterRedis = "redis" // a Redis hash on the lock's server, FencedSet/FencedHSet
	RegisterSQL   = "sql"   // a PostgreSQL row, fencing.SQLTable
	RegisterEtcd  = "etcd"  // an etcd key, FencedPut
)

// Lock backends a worker can use.
const (
	LockRedis = "redis" // backend/redis on one redis-server
	LockEtcd  = "etcd"  // backend/etcd on an etcd cluster
	// LockSentinel is backend/redis on a master found through Redis
	// Sentinel (the data connections go straight to the master, so only
	// the register's link has a fault proxy).
	LockSentinel = "sentinel"
)

// Broken backends for the negative controls.
const (
	// BrokenReleaseNoOwner releases by deleting the lock key whoever holds
	// it: a holder that lost its lease frees its successor's.
	BrokenReleaseNoOwner = "release-no-owner"
	// BrokenRenewAnyOwner renews the lock key whoever holds it: a holder
	// whose key was deleted or taken renews its successor's and stays
	// valid. Only (b) with renewals counted sees it.
	BrokenRenewAnyOwner = "renew-any-owner"
	// BrokenAcquireExpired grants a lease whose key expires on the
	// server at once (PEXPIRE 1 ms before Acquire returns): the holder
	// counts on a whole TTL while anyone can take the key.
	BrokenAcquireExpired = "acquire-expired"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	ID        int
	Lock      string   // LockRedis (default) or LockEtcd
	Fair      bool     // LockRedis through redis.FairBackend: blocking acquires wait in the server's FIFO queue
	RedisAddr string   // the lock's redis-server (through this worker's fault proxy)
	EtcdAddrs []string // the etcd members, for LockEtcd (through fault proxies)
	// Sentinels and MasterName find the master for LockSentinel; the
	// backend waits for WaitReplicas replicas (redis.Options).
	Sentinels    []string
	MasterName   string
	WaitReplicas int
	Register     string        // RegisterRedis, RegisterSQL or RegisterEtcd
	SQLDSN       string        // the register's database, for RegisterSQL (through a fault proxy)
	Bypass       bool          // write the register without the guard (negative control)
	Broken       string        // "" or a Broken* backend (negative control)
	TTL          time.Duration // the Locker's TTL
	LockKey      string
	RegKey       string
	Work         time.Duration // at most this long between the read and the write
	MinWork      time.Duration // at least this long (below Work; negative controls)
	Seed         uint64
	MaxRounds    int           // a bound on iterations
	MaxTime      time.Duration // a bound on the worker's life
}

// RunWorker runs a worker: it loops acquire, claim, read, write+1,
// release until stdin is closed (or its bounds are reached), sending one
// JSON [Event] per line to events. It returns an error only when it cannot
// run at all; every operation's failure is an event.
func RunWorker(cfg WorkerConfig, stdin io.Reader, events io.Writer) error {
	b, reg, closeAll, err := open(cfg)
	if err != nil {
		return fmt.Errorf("chaos: worker %d: %w", cfg.ID, err)
	}
	defer closeAll()
	locker, err := fencedlock.New(b, fencedlock.Options{TTL: cfg.TTL})
	if err != nil {
		return fmt.Errorf("chaos: worker %d: %w", cfg.ID, err)
	}
	defer locker.Close()

	var stop atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // the parent closes stdin to stop us
		stop.Store(true)
	}()
	w := &worker{cfg: cfg, locker: locker, reg: reg, enc: json.NewEncoder(events),
		rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID)))}
	start := time.Now()
	for i := 0; i < cfg.MaxRounds && !stop.Load() && time.Since(start) < cfg.MaxTime; i++ {
		w.round()
	}
	return w.err
}

// open makes the worker's lock backend and register; closeAll closes
// them, the backend explicitly (a Locker may not close it).
func open(cfg WorkerConfig) (b driver.Backend, reg register, closeAll func(), err error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup() // the error returns leave closeAll nil
		}
	}()
	if cfg.Lock == LockEtcd {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdAddrs, DialTimeout: cfg.TTL, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, nil, err
		}
		closers = append(closers, func() { c.Close() })
		eb, err := etcd.New(c, etcd.Options{})
		if err != nil {
			return nil, nil, nil, err
		}
		closers = append(closers, func() { eb.Close() })
		if cfg.Register != RegisterEtcd || cfg.Broken != "" || cfg.Bypass {
			return nil, nil, nil, fmt.Errorf("etcd: register %q, broken %q, bypass %v: not supported", cfg.Register, cfg.Broken, cfg.Bypass)
		}
		return eb, &etcdRegister{b: eb, c: c, key: cfg.RegKey}, cleanup, nil
	}
	// rueidis dials when the client is made: retry while the store is
	// unreachable (a fault may already be in effect), within MaxTime.
	var c rueidis.Client
	copt := rueidis.ClientOption{
		InitAddress:  []string{cfg.RedisAddr},
		DisableCache: true,
		// Fail fast on a dead link instead of rueidis's 10s default, so an
		// operation ends near its own deadline.
		ConnWriteTimeout: cfg.TTL,
		Dialer:           net.Dialer{Timeout: cfg.TTL},
	}
	ropt := redis.Options{}
	if cfg.Lock == LockSentinel {
		copt.InitAddress = cfg.Sentinels
		copt.Sentinel = rueidis.SentinelOption{MasterSet: cfg.MasterName}
		ropt.WaitReplicas, ropt.WaitTimeout = cfg.WaitReplicas, cfg.TTL/2
	}
	for start := time.Now(); ; time.Sleep(cfg.TTL / 10) {
		c, err = rueidis.NewClient(copt)
		if err == nil {
			break
		}
		if time.Since(start) > cfg.MaxTime {
			return nil, nil, nil, fmt.Errorf("redis client: %w", err)
		}
	}
	closers = append(closers, c.Close)
	rb, err := redis.New(c, ropt)
	if err != nil {
		return nil, nil, nil, err
	}
	closers = append(closers, func() { rb.Close() })
	b = rb
	if cfg.Fair {
		b = &redis.FairBackend{Backend: rb}
	}
	switch cfg.Broken {
	case "":
	case BrokenReleaseNoOwner:
		b = &releaseNoOwner{Backend: rb, c: c}
	case BrokenRenewAnyOwner:
		b = &renewAnyOwner{Backend: rb, c: c}
	case BrokenAcquireExpired:
		b = &acquireExpired{Backend: rb, c: c}
	default:
		return nil, nil, nil, fmt.Errorf("unknown broken backend %q", cfg.Broken)
	}
	switch cfg.Register {
	case RegisterRedis:
		reg = &redisRegister{b: rb, c: c, key: cfg.RegKey, bypass: cfg.Bypass}
	case RegisterSQL:
		db, err := sql.Open("postgres", cfg.SQLDSN)
		if err != nil {
			return nil, nil, nil, err
		}
		closers = append(closers, func() { db.Close() })
		db.SetMaxOpenConns(4)
		reg = &sqlRegister{db: db, key: cfg.RegKey, bypass: cfg.Bypass}
	default:
		return nil, nil, nil, fmt.Errorf("unknown register %q", cfg.Register)
	}
	return b, reg, cleanup, nil
}

// releaseNoOwner is a deliberately broken backend: its Release deletes the
// lock key (and wakes waiters) without checking the owner.
type releaseNoOwner struct {
	*redis.Backend
	c rueidis.Client
}

func (b *releaseNoOwner) Release(ctx context.Context, g driver.Grant) error {
	cmds := rueidis.Commands{
		b.c.B().Del().Key(b.LockKey(g.Key)).Build(),
		b.c.B().Publish().Channel(b.Channel(g.Key)).Message("released").Build(),
	}
	for _, r := range b.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// renewAnyOwner is a deliberately broken backend: its Renew extends the
// lock key whoever holds it (PEXPIRE without the owner check).
type renewAnyOwner struct {
	*redis.Backend
	c rueidis.Client
}

func (b *renewAnyOwner) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	n, err := b.c.Do(ctx, b.c.B().Pexpire().Key(b.LockKey(g.Key)).Milliseconds(ttl.Milliseconds()).Build()).AsInt64()
	if err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("chaos: renew-any-owner: no key: %w", driver.ErrNotHeld)
	}
	return ttl, nil
}

// acquireExpired is a deliberately broken backend: the lease it grants
// has already expired on the server when Acquire returns.
type acquireExpired struct {
	*redis.Backend
	c rueidis.Client
}

func (b *acquireExpired) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	// Expire the key now; wait out the millisecond so it is gone.
	if err := b.c.Do(ctx, b.c.B().Pexpire().Key(b.LockKey(req.Key)).Milliseconds(1).Build()).Error(); err != nil {
		return g, err
	}
	time.Sleep(2 * time.Millisecond)
	return g, nil
}

type worker struct {
	cfg    WorkerConfig
	locker *fencedlock.Locker
	reg    register
	rng    *rand.Rand

	mu  sync.Mutex // serialises enc between the loop and lease watchers
	enc *json.Encoder
	err error // the first error sending an event
}

func (w *worker) emit(e Event) {
	e.Worker = w.cfg.ID
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(e); err != nil && w.err == nil {
		w.err = fmt.Errorf("chaos: worker %d: sending an event: %w", w.cfg.ID, err)
	}
}

// invoke records the start of op and returns the time it was taken.
func (w *worker) invoke(e Event) {
	e.Phase = Invoke
	e.T = Now()
	w.emit(e)
}

// done records the completion of op with the phase err implies.
func (w *worker) done(e Event, err error) {
	e.T = Now()
	e.Phase = phaseOf(err)
	if err != nil {
		e.Err = err.Error()
	}
	w.emit(e)
}

// phaseOf classifies an operation's error: nil is ok; errFail is fail; a
// guard's rejection is stale; anything else is an unknown outcome (info), because a request
// that timed out or lost its connection may have been applied.
func phaseOf(err error) Phase {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, errFail):
		return Fail
	case errors.Is(err, fencing.ErrStale):
		return Stale
	default:
		return Info
	}
}

// mono converts a time of this process's clock to CLOCK_MONOTONIC.
func mono(t time.Time) int64 { return Now() + int64(time.Until(t)) }

func (w *worker) round() {
	ttl := w.cfg.TTL
	w.invoke(Event{Op: OpAcquire})
	actx, cancel := context.WithTimeout(context.Background(), 2*ttl)
	lease, err := w.locker.Acquire(actx, w.cfg.LockKey)
	cancel()
	if err != nil {
		// Acquire cleans up after itself; no grant reached us.
		w.done(Event{Op: OpAcquire}, errors.Join(errFail, err))
		time.Sleep(time.Duration(w.rng.Int64N(int64(ttl / 10))))
		return
	}
	fence, holder := lease.Fence(), lease.Holder()
	var last atomic.Int64 // the last local deadline seen
	last.Store(mono(lease.Deadline()))
	w.done(Event{Op: OpAcquire, Fence: uint64(fence), Holder: holder, Deadline: last.Load()}, nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tk := time.NewTicker(ttl / 20)
		defer tk.Stop()
		for {
			select {
			case <-lease.Done():
				if cause := context.Cause(lease.Context()); errors.Is(cause, fencedlock.ErrLeaseLost) {
					w.emit(Event{Op: OpLost, Phase: Info, T: Now(), Fence: uint64(fence), Holder: holder, Deadline: last.Load(), Err: cause.Error()})
				}
				return
			case <-tk.C:
				if lease.Err() != nil {
					continue // ended: Done is closed or about to be
				}
				// A later deadline is a renewal: record it, so the
				// checker counts the lease valid until then.
				if d := mono(lease.Deadline()); d > last.Load()+int64(time.Millisecond) {
					last.Store(d)
					w.emit(Event{Op: OpRenew, Phase: OK, T: Now(), Fence: uint64(fence), Holder: holder, Deadline: d})
				}
			}
		}
	}()

	// The critical section. It does not check the lease before writing:
	// a check can always be overtaken by a pause, which is what the guard
	// is for.
	ev := Event{Fence: uint64(fence), Holder: holder}
	op := func(o Op, v int64, f func(ctx context.Context) error) error {
		e := ev
		e.Op, e.Value = o, v
		w.invoke(e)
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		defer cancel()
		err := f(ctx)
		w.done(e, err)
		return err
	}
	if err := op(OpClaim, 0, func(ctx context.Context) error { return w.reg.Claim(ctx, fence, holder) }); err == nil {
		var v int64
		w.invoke(Event{Op: OpRead})
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		v, err := w.reg.Read(ctx)
		cancel()
		if err != nil {
			err = errors.Join(errFail, err) // a read changes nothing
		}
		w.done(Event{Op: OpRead, Value: v}, err)
		if err == nil {
			if w.cfg.Work > w.cfg.MinWork {
				time.Sleep(w.cfg.MinWork + time.Duration(w.rng.Int64N(int64(w.cfg.Work-w.cfg.MinWork))))
			}
			_ = op(OpWrite, v+1, func(ctx context.Context) error { return w.reg.Write(ctx, v+1, fence, holder) })
		}
	}
	if lease.Err() == nil {
		last.Store(max(last.Load(), mono(lease.Deadline())))
	}
	w.invoke(Event{Op: OpRelease, Fence: uint64(fence), Holder: holder, Deadline: last.Load()})
	err = lease.Release(context.Background())
	if err != nil {
		err = errors.Join(errFail, err) // the lease ended either way
	}
	w.done(Event{Op: OpRelease, Fence: uint64(fence), Holder: holder}, err)
	<-watched
}

// errFail marks an error of an operation that certainly had no effect on
// the register (a failed read, acquire or release), so phaseOf need not
// guess.
var errFail = errors.New("chaos: no effect")

// WorkerMain runs a worker configured by the WorkerEnv variable, with its
// events on file descriptor 3, and returns the process's exit code. Call it
// from TestMain when the variable is set.
func WorkerMain() int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: worker config: %v\n", err)
		return 2
	}
	events := os.NewFile(3, "events") // one write(2) per event: unbuffered
	defer events.Close()
	if err := RunWorker(cfg, os.Stdin, events); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
