package clustertest

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/internal/multilocktest"
)

// TestMultilock runs the scenarios of internal/multilocktest on the etcd
// backend (driver.MultiLocker: one Txn on one lease per set), each client
// on the next member. Delete removes one key's queue entry, not the
// set's lease: the renewal must find that key gone.
func TestMultilock(t *testing.T) {
	e := newEnv(t)
	n := 0
	multilocktest.Run(t, multilocktest.Setup{
		New: func(t *testing.T) multilocktest.Backend {
			b := e.backend(n % len(e.clus.Members))
			n++
			return b
		},
		Delete: func(t *testing.T, key string) {
			resp, err := e.admin.Delete(context.Background(), dir(key), clientv3.WithPrefix())
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("deleting the entry of %q: %d deleted, %v", key, resp.Deleted, err)
			}
		},
	})
}
