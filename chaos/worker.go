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
	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL driver ("pgx") of the SQL register
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
	Lock      string   // LockRedis (default), LockEtcd or LockPostgres
	Fair      bool     // LockPostgres through postgres.Fair (on Redis blocking acquires always wait in the server's FIFO queue)
	RedisAddr string   // the lock's redis-server (through this worker's fault proxy)
	EtcdAddrs []string // the etcd members, for LockEtcd (through fault proxies)
	// Sentinels and MasterName find the master for LockSentinel; the
	// backend waits for WaitReplicas replicas (redis.Options).
	Sentinels    []string
	MasterName   string
	WaitReplicas int
	Register     string        // RegisterRedis, RegisterSQL or RegisterEtcd
	SQLDSN       string        // the register's database, for RegisterSQL (through a fault proxy)
	PostgresURL  string        // the lock's and register's database, for LockPostgres (through a fault proxy)
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
	Mode         string        // ModeLock (default), ModeSemaphore, ModeElection, ModeRW or ModeRWBroken
	Limit        int           // the semaphore's limit, for ModeSemaphore
	// Split campaigns in one of two elections (by ID parity) while
	// writing the one register: two leaders at once (negative control).
	Split bool
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
	acquire, closeAcq, err := newAcquirer(cfg, b)
	if err != nil {
		return fmt.Errorf("chaos: worker %d: %w", cfg.ID, err)
	}
	defer closeAcq()

	var stop atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, stdin) // the parent closes stdin to stop us
		stop.Store(true)
	}()
	w := &worker{cfg: cfg, acquire: acquire, reg: reg, slots: map[int]register{}, enc: json.NewEncoder(events),
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
	add := func(c func()) { closers = append(closers, c) }
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	switch cfg.Lock {
	case LockEtcd:
		b, reg, err = openEtcd(cfg, add)
	case LockPostgres:
		b, reg, err = openPostgres(cfg, add)
	default:
		b, reg, err = openRedis(cfg, add)
	}
	if err != nil {
		cleanup() // the error returns leave closeAll nil
		return nil, nil, nil, err
	}
	return b, reg, cleanup, nil
}

// openEtcd makes the etcd backend and register, passing what is to be
// closed to add.
func openEtcd(cfg WorkerConfig, add func(func())) (driver.Backend, register, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdAddrs, DialTimeout: cfg.TTL, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	add(func() { c.Close() })
	eb, err := etcd.New(c, etcd.Options{})
	if err != nil {
		return nil, nil, err
	}
	add(func() { eb.Close() })
	if cfg.Register != RegisterEtcd || cfg.Broken != "" || cfg.Bypass {
		return nil, nil, fmt.Errorf("etcd: register %q, broken %q, bypass %v: not supported", cfg.Register, cfg.Broken, cfg.Bypass)
	}
	return eb, &etcdRegister{b: eb, c: c, key: cfg.RegKey}, nil
}

// openRedis makes the Redis backend (fair or broken as cfg says) and the
// register, passing what is to be closed to add.
func openRedis(cfg WorkerConfig, add func(func())) (driver.Backend, register, error) {
	c, ropt, err := dialRedis(cfg)
	if err != nil {
		return nil, nil, err
	}
	add(c.Close)
	rb, err := redis.New(c, ropt)
	if err != nil {
		return nil, nil, err
	}
	add(func() { rb.Close() })
	var b driver.Backend = rb
	switch cfg.Broken {
	case "":
	case BrokenReleaseNoOwner:
		b = &releaseNoOwner{Backend: rb, c: c}
	case BrokenRenewAnyOwner:
		b = &renewAnyOwner{Backend: rb, c: c}
	case BrokenAcquireExpired:
		b = &acquireExpired{Backend: rb, c: c}
	default:
		return nil, nil, fmt.Errorf("unknown broken backend %q", cfg.Broken)
	}
	switch cfg.Register {
	case RegisterRedis:
		return b, &redisRegister{b: rb, c: c, key: cfg.RegKey, bypass: cfg.Bypass}, nil
	case RegisterSQL:
		db, err := sql.Open("pgx", cfg.SQLDSN)
		if err != nil {
			return nil, nil, err
		}
		add(func() { db.Close() })
		db.SetMaxOpenConns(4)
		return b, &sqlRegister{db: db, key: cfg.RegKey, bypass: cfg.Bypass}, nil
	default:
		return nil, nil, fmt.Errorf("unknown register %q", cfg.Register)
	}
}

// dialRedis makes the rueidis client (standalone or through Sentinel)
// and the backend's options. rueidis dials when the client is made: it
// retries while the store is unreachable (a fault may already be in
// effect), within MaxTime.
func dialRedis(cfg WorkerConfig) (rueidis.Client, redis.Options, error) {
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
		c, err := rueidis.NewClient(copt)
		if err == nil {
			return c, ropt, nil
		}
		if time.Since(start) > cfg.MaxTime {
			return nil, ropt, fmt.Errorf("redis client: %w", err)
		}
	}
}

type worker struct {
	cfg     WorkerConfig
	acquire acquirer
	reg     register
	slots   map[int]register // ModeSemaphore: the register of each slot (regFor)
	reader  bool             // ModeRW: the lease held is a read lease (no write)
	rng     *rand.Rand

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
	lease, slot, err := w.acquire(actx)
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
	w.reader, slot = w.cfg.Mode == ModeRW && slot == rwReadSlot, max(slot, 0)
	w.done(Event{Op: OpAcquire, Fence: uint64(fence), Slot: slot, Holder: holder, Deadline: last.Load(), Read: w.reader}, nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		w.watchLease(lease, slot, &last)
	}()
	w.critical(lease, slot)
	if lease.Err() == nil {
		last.Store(max(last.Load(), mono(lease.Deadline())))
	}
	w.invoke(Event{Op: OpRelease, Fence: uint64(fence), Slot: slot, Holder: holder, Deadline: last.Load()})
	err = lease.Release(context.Background())
	if err != nil {
		err = errors.Join(errFail, err) // the lease ended either way
	}
	w.done(Event{Op: OpRelease, Fence: uint64(fence), Slot: slot, Holder: holder}, err)
	<-watched
}

// watchLease records lease's renewals (each later local deadline, kept
// in last) and its loss, until it ends.
func (w *worker) watchLease(lease *fencedlock.Lease, slot int, last *atomic.Int64) {
	ttl := w.cfg.TTL
	fence, holder := lease.Fence(), lease.Holder()
	tk := time.NewTicker(ttl / 20)
	defer tk.Stop()
	for {
		select {
		case <-lease.Done():
			if cause := context.Cause(lease.Context()); errors.Is(cause, fencedlock.ErrLeaseLost) {
				w.emit(Event{Op: OpLost, Phase: Info, T: Now(), Fence: uint64(fence), Slot: slot, Holder: holder, Deadline: last.Load(), Err: cause.Error()})
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
				w.emit(Event{Op: OpRenew, Phase: OK, T: Now(), Fence: uint64(fence), Slot: slot, Holder: holder, Deadline: d})
			}
		}
	}
}

// critical is the critical section under lease: claim the register, read
// it and write it incremented. In ModeSemaphore the register is slot's.
func (w *worker) critical(lease *fencedlock.Lease, slot int) {
	ttl := w.cfg.TTL
	fence, holder := lease.Fence(), lease.Holder()
	// The critical section. It does not check the lease before writing:
	// a check can always be overtaken by a pause, which is what the guard
	// is for.
	ev := Event{Fence: uint64(fence), Slot: slot, Holder: holder}
	reg, err := w.regFor(slot)
	if err != nil {
		w.mu.Lock()
		w.err = errors.Join(w.err, err)
		w.mu.Unlock()
		return
	}
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
	claim := func(ctx context.Context) error { return reg.Claim(ctx, fence, holder) }
	if w.reader {
		claim = nil // a reader writes nothing, so it claims nothing
	}
	if claim == nil || op(OpClaim, 0, claim) == nil {
		var v int64
		w.invoke(Event{Op: OpRead, Slot: slot})
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		v, err := reg.Read(ctx)
		cancel()
		if err != nil {
			err = errors.Join(errFail, err) // a read changes nothing
		}
		w.done(Event{Op: OpRead, Slot: slot, Value: v}, err)
		if err == nil && !w.reader {
			if w.cfg.Work > w.cfg.MinWork {
				time.Sleep(w.cfg.MinWork + time.Duration(w.rng.Int64N(int64(w.cfg.Work-w.cfg.MinWork))))
			}
			_ = op(OpWrite, v+1, func(ctx context.Context) error { return reg.Write(ctx, v+1, fence, holder) })
		}
	}
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
