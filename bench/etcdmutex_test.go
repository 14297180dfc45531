package bench

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// etcd's client/v3/concurrency Mutex, two ways:
//   - etcd-mutex: one Session (lease with keepalive) per lock, closed
//     (revoked) on release: each lock has its own TTL and is lost on its
//     own, as with fencedlock's leases;
//   - etcd-mutex-shared: one Session per client for all its locks, the way
//     the package's examples use it (cheaper, but the locks share one lease
//     and die together).
// Manual renew is KeepAliveOnce on the session's lease. Lock waits by
// watching its predecessor's key.

func init() {
	register(contender{
		name:        "etcd-mutex",
		server:      "etcd",
		manualRenew: true,
		autoRenew:   true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			return &etcdMutexClient{c: e.newEtcd(tb), ttl: ttlSeconds(cfg.ttl)}
		},
	})
	register(contender{
		name:        "etcd-mutex-shared",
		server:      "etcd",
		manualRenew: true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			c := e.newEtcd(tb)
			s, err := concurrency.NewSession(c, concurrency.WithTTL(ttlSeconds(cfg.ttl)))
			if err != nil {
				tb.Fatalf("bench: etcd session: %v", err)
			}
			return &etcdMutexClient{c: c, shared: s}
		},
	})
}

// ttlSeconds rounds a TTL up to whole seconds, etcd's lease unit.
func ttlSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

type etcdMutexClient struct {
	c      *clientv3.Client
	ttl    int
	shared *concurrency.Session
}

func (m *etcdMutexClient) acquire(ctx context.Context, key string) (heldLock, error) {
	s := m.shared
	if s == nil {
		var err error
		if s, err = concurrency.NewSession(m.c, concurrency.WithTTL(m.ttl)); err != nil {
			return nil, err
		}
	}
	mu := concurrency.NewMutex(s, "/bench-mutex/"+key)
	if err := mu.Lock(ctx); err != nil {
		if m.shared == nil {
			_ = s.Close()
		}
		return nil, err
	}
	return &etcdMutexLock{c: m.c, s: s, mu: mu, own: m.shared == nil}, nil
}

func (m *etcdMutexClient) close() {
	if m.shared != nil {
		_ = m.shared.Close()
	}
	_ = m.c.Close()
}

type etcdMutexLock struct {
	c   *clientv3.Client
	s   *concurrency.Session
	mu  *concurrency.Mutex
	own bool // the session is this lock's: close it on release
}

func (l *etcdMutexLock) Renew(ctx context.Context) error {
	_, err := l.c.KeepAliveOnce(ctx, l.s.Lease())
	return err
}

func (l *etcdMutexLock) Release(ctx context.Context) error {
	err := l.mu.Unlock(ctx)
	if l.own {
		if cerr := l.s.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (l *etcdMutexLock) Done() <-chan struct{} { return l.s.Done() }
