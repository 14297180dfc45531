package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencedlock/fencedlock/internal/clitest"
)

// Flags of the test binary. Pass them after -args, or use the environment
// variables named in their help.
var (
	flagRedisURL = flag.String("redis-url", os.Getenv("BENCH_REDIS_URL"),
		"Redis to benchmark against, e.g. redis://127.0.0.1:6379/0 (env BENCH_REDIS_URL); default: start redis-server on loopback")
	flagEtcd = flag.String("etcd-endpoints", os.Getenv("BENCH_ETCD_ENDPOINTS"),
		"comma-separated etcd endpoints (env BENCH_ETCD_ENDPOINTS); default: start a single-member etcd on loopback")
	flagDuration = flag.Duration("duration", 2*time.Second,
		"length of each fixed-duration scenario (Contended, Handoff); -short uses 200ms")
	flagLeases = flag.Int("leases", 10000, "leases held by one process in ManyLeases; -short uses 100")
	flagHold   = flag.Duration("hold", 10*time.Second, "how long ManyLeases holds its leases; -short uses 1s")
)

// etcdChildEnv, when set, turns the test binary into an etcd server: the
// benchmark runs etcd in a child process of its own binary, so that the
// server's allocations and CPU do not count against the client libraries.
const etcdChildEnv = "FENCEDLOCK_BENCH_ETCD_DIR"

// redisBinary is the redis-server the benchmark starts when no URL is given.
const redisBinary = "redis-server"

// env is the pair of servers every benchmark of one run shares.
type env struct {
	redisOpt  rueidis.ClientOption // for rueidis-based contenders
	goredis   *goredis.Options     // for go-redis-based contenders
	etcdEPs   []string
	stats     rueidis.Client // INFO commandstats reader
	ownRedis  bool
	ownEtcd   bool
	stopFuncs []func()
}

var (
	envOnce sync.Once
	envVal  *env
	envErr  error
)

// servers returns the shared servers, starting them on first use.
func servers(tb testing.TB) *env {
	tb.Helper()
	envOnce.Do(func() { envVal, envErr = startEnv() })
	if envErr != nil {
		tb.Fatalf("bench: %v", envErr)
	}
	return envVal
}

func stopEnv() {
	if envVal == nil {
		return
	}
	for i := len(envVal.stopFuncs) - 1; i >= 0; i-- {
		envVal.stopFuncs[i]()
	}
}

func startEnv() (*env, error) {
	e := &env{}
	ok := false
	defer func() {
		if !ok {
			envVal = e
			stopEnv()
			envVal = nil
		}
	}()
	redisURL := *flagRedisURL
	if redisURL == "" {
		addr, stop, err := startRedis()
		if err != nil {
			return nil, err
		}
		e.stopFuncs = append(e.stopFuncs, stop)
		e.ownRedis = true
		redisURL = "redis://" + addr + "/0"
	}
	opt, err := rueidis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	e.redisOpt = opt
	if e.goredis, err = goredis.ParseURL(redisURL); err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	statsOpt := opt
	statsOpt.DisableCache = true
	if e.stats, err = rueidis.NewClient(statsOpt); err != nil {
		return nil, fmt.Errorf("connecting to redis %s: %w", redacted(redisURL), err)
	}
	e.stopFuncs = append(e.stopFuncs, e.stats.Close)

	if *flagEtcd == "" {
		ep, stop, err := startEtcdChild()
		if err != nil {
			return nil, err
		}
		e.stopFuncs = append(e.stopFuncs, stop)
		e.ownEtcd = true
		e.etcdEPs = []string{ep}
	} else {
		e.etcdEPs = strings.Split(*flagEtcd, ",")
	}
	ok = true
	return e, nil
}

// redacted hides a password in a URL.
func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

// startRedis starts redis-server on a free loopback port without
// persistence and waits until it answers.
func startRedis() (addr string, stop func(), err error) {
	bin, err := exec.LookPath(redisBinary)
	if err != nil {
		return "", nil, fmt.Errorf("%s not found on PATH (%v): install it (Debian: apt-get install redis-server) or set BENCH_REDIS_URL", redisBinary, err)
	}
	dir, err := os.MkdirTemp("", "fencedlock-bench-redis-")
	if err != nil {
		return "", nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := clitest.FreePort()
		if err != nil {
			return "", nil, err
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"dir " + strconv.Quote(dir),
			"save \"\"",
			"appendonly no",
			"daemonize no",
			"logfile \"\"",
			"maxclients 10000",
		}, "\n") + "\n"
		confPath := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			return "", nil, err
		}
		cmd := exec.Command(bin, confPath)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		out := new(clitest.SyncBuffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return "", nil, fmt.Errorf("starting redis-server: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop = func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			_ = os.RemoveAll(dir)
		}
		if lastErr = waitDial(addr, done, 15*time.Second); lastErr == nil {
			return addr, stop, nil
		}
		stop()
		lastErr = fmt.Errorf("%w; log:\n%s", lastErr, out)
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
		if dir, err = os.MkdirTemp("", "fencedlock-bench-redis-"); err != nil {
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("starting redis-server: %w", lastErr)
}

// waitDial waits until addr accepts a connection that answers PING.
func waitDial(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during start")
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			if err == nil {
				_, err = io.ReadFull(c, buf)
			}
			c.Close()
			if err == nil && string(buf) == "+PONG\r\n" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not answering on %s after %v: %v", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startEtcdChild runs this test binary again as a single-member etcd
// server (see runEtcdChild) and returns its client endpoint.
func startEtcdChild() (endpoint string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "fencedlock-bench-etcd-")
	if err != nil {
		return "", nil, err
	}
	endpoint, stopChild, err := clitest.StartSelf("etcd child", etcdChildEnv, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return endpoint, func() {
		stopChild()
		_ = os.RemoveAll(dir)
	}, nil
}

// runEtcdChild is the body of the etcd child process: it serves until its
// standard input closes (the parent stopped or died).
func runEtcdChild(dir string) int {
	cport, err := clitest.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pport, err := clitest.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	curl, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(cport))
	purl, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(pport))
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*curl}
	cfg.AdvertiseClientUrls = []url.URL{*curl}
	cfg.ListenPeerUrls = []url.URL{*purl}
	cfg.AdvertisePeerUrls = []url.URL{*purl}
	cfg.InitialCluster = cfg.Name + "=" + purl.String()
	cfg.LogLevel = "error"
	// The started server is for comparing client libraries on one machine,
	// not for measuring disks: point BENCH_ETCD_ENDPOINTS at a real
	// cluster for production figures.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd: not ready after 30s")
		e.Close()
		return 1
	}
	fmt.Printf("READY %s\n", curl.String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	e.Close()
	return 0
}

// newRueidis returns a new rueidis client for the benchmark Redis.
func (e *env) newRueidis(tb testing.TB, edit func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	opt := e.redisOpt
	if edit != nil {
		edit(&opt)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("bench: rueidis client: %v", err)
	}
	return c
}

// newGoRedis returns a new go-redis client for the benchmark Redis.
func (e *env) newGoRedis() *goredis.Client {
	o := *e.goredis
	return goredis.NewClient(&o)
}

// newEtcd returns a new etcd client for the benchmark etcd.
func (e *env) newEtcd(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(etcdConfig(e.etcdEPs))
	if err != nil {
		tb.Fatalf("bench: etcd client: %v", err)
	}
	return c
}

// etcdConfig is the client configuration of every etcd contender. The
// client's logger is silenced: its retry warnings at the end of a timed
// run would interleave with the benchmark output.
func etcdConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
}

// commandStats returns the calls per command from INFO commandstats,
// leaving out connection housekeeping and the INFO calls themselves.
func (e *env) commandStats(ctx context.Context) (map[string]int64, error) {
	s, err := e.stats.Do(ctx, e.stats.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	m := make(map[string]int64)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		switch {
		case name == "info", name == "hello", name == "ping", name == "auth", name == "select",
			strings.HasPrefix(name, "client|"), strings.HasPrefix(name, "command|"), name == "config|get":
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					m[name] = n
				}
			}
		}
	}
	return m, nil
}

// describeRedis returns the server version and where it runs.
func (e *env) describeRedis() string {
	where := "at BENCH_REDIS_URL"
	if e.ownRedis {
		where = "started by the benchmark on loopback, no persistence"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.stats.Do(ctx, e.stats.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "version unknown (" + err.Error() + "), " + where
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v + ", " + where
		}
	}
	return "version unknown, " + where
}

// describeEtcd returns the server version and where it runs.
func (e *env) describeEtcd() string {
	where := "at BENCH_ETCD_ENDPOINTS"
	if e.ownEtcd {
		where = "single member started by the benchmark in a child process on loopback, fsync off"
	}
	c, err := clientv3.New(etcdConfig(e.etcdEPs))
	if err != nil {
		return "version unknown, " + where
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx, e.etcdEPs[0])
	if err != nil {
		return "version unknown, " + where
	}
	return st.Version + ", " + where
}
