package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fencedlock on its etcd backend (client/v3), default options except the
// TTL; the scenarios that renew by hand set ManualRenew.

func init() {
	register(contender{
		name:        "fencedlock-etcd",
		server:      "etcd",
		manualRenew: true,
		autoRenew:   true,
		open: func(tb testing.TB, e *env, cfg clientConfig) lockClient {
			b, c := e.newEtcdBackend(tb)
			return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); _ = c.Close() }}
		},
	})
}

// newEtcdBackend returns fencedlock's etcd backend with default options
// on a new etcd client of its own, and that client: the caller closes
// both, the backend first.
func (e *env) newEtcdBackend(tb testing.TB) (*etcd.Backend, *clientv3.Client) {
	tb.Helper()
	c := e.newEtcd(tb)
	b, err := etcd.New(c, etcd.Options{})
	if err != nil {
		tb.Fatalf("bench: fencedlock etcd backend: %v", err)
	}
	return b, c
}
