package chaos

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/redis/rueidis"
)

// setup is one system under test: a redis-server for the lock (and, for
// RegisterRedis, the register), optionally PostgreSQL for the register.
type setup struct {
	name     string
	register string
	kinds    []FaultKind
	srv      *testserver.Redis
	pg       *testserver.Postgres
	admin    rueidis.Client // direct to srv: the operator and the final read
	adminB   *redis.Backend
	db       *sql.DB // direct to pg
	etcd     *etcdCluster
	postgres *pgSetup // the lock and the register on PostgreSQL
	sentinel *sentinelDeploy
	bypass   bool
	fair     bool // the workers' lock is postgres.Fair (Redis: always its queue)
	broken   string
	work     time.Duration // the workers' Work
	minWork  time.Duration // the workers' MinWork
	// minFault, if set, lengthens shorter faults of the schedule: the
	// negative controls need pauses past the lease whatever the seed.
	minFault time.Duration
	// minLength, if set, lengthens a negative control's schedule.
	minLength time.Duration
	// spacing, if set, drops the faults of the schedule that start less
	// than this long after the previous one kept.
	spacing time.Duration
	// mode is the workers' workload (ModeLock, ModeSemaphore,
	// ModeElection); limit the semaphore's limit they acquire with and
	// checkLimit the one the checker holds them to (limit unless a
	// negative control); split the election negative control.
	mode              string
	limit, checkLimit int
	split             bool
	// wake makes a del-lock on Redis standalone also publish a release
	// notification, so waiters race for the key at once (a negative
	// control's way to get a successor before the deleted lease's next
	// renewal).
	wake bool
}

// runConfig is one run: a setup, a seed and the run's size.
type runConfig struct {
	seed    uint64
	workers int
	ttl     time.Duration
	length  time.Duration
}

// runResult is what one run produced.
type runResult struct {
	faults  []FaultRecord
	history History
	report  Report
	logs    []string // the workers' stderr
}

// worker process as the parent sees it.
type proc struct {
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer
	proxies []*faultproxy.Proxy
	done    chan error
	exited  atomic.Bool
}

// tracker follows what each worker is doing, from its events, so the
// nemesis can aim at the holder.
type tracker struct {
	mu      sync.Mutex
	events  []Event
	holding map[int]bool
	reading map[int]bool // between a read's ok and its write's completion
	seen    map[int]bool
	err     error
}

func (tr *tracker) add(e Event) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, e)
	tr.seen[e.Worker] = true
	switch {
	case e.Op == OpAcquire && e.Phase == OK:
		tr.holding[e.Worker] = true
	case e.Op == OpRead && e.Phase == OK:
		tr.reading[e.Worker] = true
	case e.Op == OpWrite && e.Phase != Invoke:
		tr.reading[e.Worker] = false
	case e.Op == OpRelease && e.Phase == Invoke, e.Op == OpLost:
		tr.holding[e.Worker], tr.reading[e.Worker] = false, false
	}
}

// started returns how many workers have sent an event.
func (tr *tracker) started() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.seen)
}

// holder returns a worker holding the lock, preferring one between its
// read and its write, that paused does not exclude; -1 if none.
func (tr *tracker) holder(paused map[int]bool) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	best := -1
	for w, h := range tr.holding {
		if !h || paused[w] {
			continue
		}
		if tr.reading[w] {
			return w
		}
		best = w
	}
	return best
}

// delRedisLock deletes a Redis lock key as an operator would, and returns
// the holder id of the lease whose key it deleted ("" if it was free), read
// in the same step (GETDEL): the checker excuses only what this deletion
// explains.
func delRedisLock(ctx context.Context, c rueidis.Client, lockKey string) (n int64, holder string, err error) {
	owner, err := c.Do(ctx, c.B().Getdel().Key(lockKey).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return 0, "", nil
	case err != nil:
		return 0, "", err
	}
	return 1, driver.HolderID(owner), nil
}

// run runs the workers and the nemesis once and checks the history.
func run(t *testing.T, s *setup, rc runConfig) runResult {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lockKey := fmt.Sprintf("chaos-%s-%d", s.name, rc.seed)
	regKey := "chaos:register:" + lockKey
	if s.register == RegisterSQL {
		rows := []string{regKey}
		if s.mode == ModeSemaphore { // a row per slot, the negative control's extra slot included
			for slot := range s.limit + 1 {
				rows = append(rows, SlotRegKey(regKey, slot))
			}
		}
		for _, key := range rows {
			if _, err := s.db.Exec("INSERT INTO chaos_register (key) VALUES ($1) ON CONFLICT (key) DO NOTHING", key); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr := &tracker{holding: map[int]bool{}, reading: map[int]bool{}, seen: map[int]bool{}}
	procs := make([]*proc, rc.workers)
	defer func() { // on an early exit (t.Fatal), leave no worker behind
		for _, p := range procs {
			if p != nil && p.cmd.Process != nil && !p.exited.Load() {
				_ = p.cmd.Process.Kill()
			}
		}
	}()
	var readers sync.WaitGroup
	for i := range procs {
		p := &proc{id: i, done: make(chan error, 1)}
		procs[i] = p
		cfg := WorkerConfig{ID: i, Register: s.register, Bypass: s.bypass, Broken: s.broken,
			TTL: rc.ttl, LockKey: lockKey, RegKey: regKey, Work: s.work, MinWork: s.minWork, Seed: rc.seed,
			MaxRounds: 100000, MaxTime: rc.length + 30*time.Second, Fair: s.fair,
			Mode: s.mode, Limit: s.limit, Split: s.split}
		targets := []string{}
		switch {
		case s.sentinel != nil:
			cfg.Lock = LockSentinel
			cfg.Sentinels, cfg.MasterName, cfg.WaitReplicas = s.sentinel.addrs(), s.sentinel.g.MasterName, s.sentinel.wait
		case s.etcd != nil:
			cfg.Lock = LockEtcd
			targets = s.etcd.addrs
		case s.postgres != nil:
			cfg.Lock = LockPostgres
			targets = append(targets, fmt.Sprintf("127.0.0.1:%d", s.postgres.srv.Port))
		default:
			cfg.Lock = LockRedis
			targets = append(targets, s.srv.Addr)
		}
		for _, target := range targets {
			px, err := faultproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() }) // Close is idempotent
			p.proxies = append(p.proxies, px)
			switch {
			case s.etcd != nil:
				cfg.EtcdAddrs = append(cfg.EtcdAddrs, px.Addr())
			case s.postgres != nil:
				cfg.PostgresURL = s.postgres.url(px.Addr())
			default:
				cfg.RedisAddr = px.Addr()
			}
		}
		if s.register == RegisterSQL {
			pp, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", s.pg.Port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pp.Close() })
			p.proxies = append(p.proxies, pp)
			_, port, _ := net.SplitHostPort(pp.Addr())
			cfg.SQLDSN = fmt.Sprintf("host=127.0.0.1 port=%s user=%s dbname=postgres sslmode=disable connect_timeout=2", port, s.pg.User)
		}
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p.cmd = exec.Command(exe, "-test.run=^$")
		p.cmd.Env = append(os.Environ(), WorkerEnv+"="+string(js))
		p.cmd.ExtraFiles = []*os.File{w}
		p.cmd.Stderr = &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer r.Close()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				var e Event
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					tr.mu.Lock()
					tr.err = fmt.Errorf("worker %d sent %q: %w", p.id, sc.Text(), err)
					tr.mu.Unlock()
					continue
				}
				tr.add(e)
			}
		}()
		go func() {
			err := p.cmd.Wait()
			p.exited.Store(true)
			p.done <- err
		}()
	}

	// Start the schedule once every worker is running its loop.
	for deadline := time.Now().Add(30 * time.Second); tr.started() < rc.workers; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d workers started within 30s", tr.started(), rc.workers)
		}
	}
	var res runResult
	paused := map[int]bool{}
	defer func() { // never leave a worker stopped
		for w := range paused {
			_ = procs[w].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	plan := Schedule(rc.seed, only(s.kinds), rc.workers, rc.ttl, rc.length)
	for i := range plan {
		plan[i].Duration = max(plan[i].Duration, s.minFault)
	}
	if s.spacing > 0 {
		var kept []Fault
		for _, f := range plan {
			if len(kept) == 0 || f.Start >= kept[len(kept)-1].Start+s.spacing {
				kept = append(kept, f)
			}
		}
		plan = kept
	}
	begin := time.Now()
	for _, f := range plan {
		time.Sleep(time.Until(begin.Add(f.Start)))
		rec := FaultRecord{Fault: f, Target: f.Worker, Begin: Now()}
		heal := func() {}
		switch f.Kind {
		case FaultPauseWorker, FaultPauseHolder:
			if f.Kind == FaultPauseHolder {
				// Aim at a holder in its critical section: wait for one,
				// at most a TTL.
				deadline := time.Now().Add(rc.ttl)
				for rec.Target = tr.holder(paused); rec.Target < 0 && time.Now().Before(deadline); rec.Target = tr.holder(paused) {
					time.Sleep(time.Millisecond)
				}
				if rec.Target < 0 {
					rec.Target, rec.Note = f.Worker, "no holder found"
				}
				rec.Begin = Now()
			}
			p := procs[rec.Target]
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			paused[p.id] = true
			heal = func() { _ = p.cmd.Process.Signal(syscall.SIGCONT); delete(paused, p.id) }
		case FaultBlackhole:
			for _, px := range procs[f.Worker].proxies {
				px.Blackhole(true)
			}
			heal = func() {
				for _, px := range procs[f.Worker].proxies {
					px.Blackhole(false)
				}
			}
		case FaultLatency:
			for _, px := range procs[f.Worker].proxies {
				px.SetLatency(f.Latency)
			}
			heal = func() {
				for _, px := range procs[f.Worker].proxies {
					px.SetLatency(0)
				}
			}
		case FaultReset:
			for _, px := range procs[f.Worker].proxies {
				px.RefuseNew(true)
				px.ResetAll()
			}
			heal = func() {
				for _, px := range procs[f.Worker].proxies {
					px.RefuseNew(false)
				}
			}
		case FaultKillRestart, FaultKillRestartVolatile:
			rec.Target = -1
			if s.postgres != nil {
				s.postgres.srv.Kill()
				heal = func() { s.postgres.srv.Restart(t) }
				break
			}
			s.srv.Kill()
			heal = func() { s.srv.Restart() }
		case FaultDelLock:
			rec.Target = -1
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var n int64
			var err error
			if s.etcd != nil {
				n, rec.Deleted, err = s.etcd.delLock(ctx, lockKey)
			} else if s.postgres != nil {
				n, rec.Deleted, err = s.postgres.delLock(ctx, lockKey)
			} else if s.sentinel != nil {
				n, rec.Deleted, err = s.sentinel.delLock(ctx, lockKey)
			} else {
				n, rec.Deleted, err = delRedisLock(ctx, s.admin, s.adminB.LockKey(lockKey))
				if s.wake && err == nil {
					err = s.admin.Do(ctx, s.admin.B().Publish().Channel(s.adminB.Channel(lockKey)).Message("released").Build()).Error()
				}
			}
			cancel()
			rec.End = Now() // instant: a longer Duration (minFault) only spaces the next fault
			rec.Note = fmt.Sprintf("deleted %d keys of holder %q (err %v)", n, rec.Deleted, err)
		case FaultFailover:
			rec.Target = -1
			heal, rec.Note = s.sentinel.failover(t)
		case FaultMemberKill, FaultPartition, FaultLeaderChange:
			rec.Target = -1
			heal, rec.Note = s.etcd.fault(t, f)
		}
		time.Sleep(time.Until(begin.Add(f.Start + f.Duration)))
		heal()
		if rec.End == 0 {
			rec.End = Now()
		}
		res.faults = append(res.faults, rec)
	}
	time.Sleep(time.Until(begin.Add(rc.length)))

	// Stop: every worker running, every link healed, then close stdin.
	for w := range paused {
		_ = procs[w].cmd.Process.Signal(syscall.SIGCONT)
	}
	for _, p := range procs {
		for _, px := range p.proxies {
			px.Heal()
		}
		p.stdin.Close()
	}
	for _, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("worker %d: %v\n%s", p.id, err, p.stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("worker %d did not stop within 30s of its stop signal; killed\n%s", p.id, p.stderr.String())
		}
		for _, px := range p.proxies {
			px.Close()
		}
		res.logs = append(res.logs, p.stderr.String())
	}
	readers.Wait()
	if tr.err != nil {
		t.Fatal(tr.err)
	}
	h, err := BuildHistory(tr.events)
	if err != nil {
		t.Fatal(err)
	}
	h.Faults = res.faults

	// The final reads, after every worker stopped, straight to the store.
	copts := CheckOptions{TTL: rc.ttl, Timeout: 2 * time.Minute}
	visual := func(part string) string {
		return filepath.Join(visualDir(t), fmt.Sprintf("chaos-%s-seed%d%s.html", s.name, rc.seed, part))
	}
	if s.mode != ModeSemaphore {
		h.Final = s.finalRead(t, regKey, rc.workers)
		copts.VisualPath = visual("")
		res.history, res.report = h, Check(h, copts)
		return res
	}
	parts := SplitSlots(h)
	var reports []Report
	for slot := range s.checkLimit + 1 { // a slot at the limit is the negative control's
		p, ok := parts[slot]
		if !ok {
			continue
		}
		p.Final = s.finalRead(t, SlotRegKey(regKey, slot), rc.workers)
		copts.VisualPath = visual(fmt.Sprintf("-slot%d", slot))
		reports = append(reports, Check(p, copts))
	}
	if len(reports) != len(parts) {
		t.Errorf("permits of %d slots, limit %d", len(parts), s.checkLimit)
	}
	res.history, res.report = h, MergeReports(reports...)
	res.report.OverLimit = CheckLimit(h, s.checkLimit, rc.ttl)
	return res
}

// finalRead reads the register key straight from the store, once every
// worker stopped: the operation of (e), nil if it failed.
func (s *setup) finalRead(t *testing.T, key string, worker int) *Operation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	final := Operation{Worker: worker, Op: OpFinal, Call: Now()}
	var reg register
	switch {
	case s.etcd != nil:
		reg = s.etcd.register(key)
	case s.postgres != nil:
		reg = s.postgres.register(key)
	case s.register == RegisterSQL:
		reg = &sqlRegister{db: s.db, key: key}
	default:
		reg = &redisRegister{b: s.adminB, c: s.admin, key: key}
	}
	v, err := reg.Read(ctx)
	final.Return, final.Value, final.Phase = Now(), v, OK
	if err != nil {
		t.Errorf("final read: %v", err)
		return nil
	}
	return &final
}
