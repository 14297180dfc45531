package bench

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
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
			c := e.newEtcd(tb)
			b, err := etcd.New(c, etcd.Options{})
			if err != nil {
				tb.Fatalf("bench: fencedlock etcd backend: %v", err)
			}
			return &fencedClient{l: mustLocker(tb, b, fencedlock.Options{TTL: cfg.ttl, RenewInterval: cfg.renew, ManualRenew: cfg.manual}), closeClient: func() { b.Close(); _ = c.Close() }}
		},
	})
}
