package clustertest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
)

// conformanceHarness gives every backend its own client on a different
// member of one 3-member cluster, as separate processes would have.
type conformanceHarness struct {
	e *env
	n int
}

func (h *conformanceHarness) NewBackend(ctx context.Context) (driver.Backend, error) {
	b := h.e.backend(h.n % len(h.e.clus.Members))
	h.n++
	return b, nil
}

// Invalidate revokes the holder's lease (the first queue entry by create
// revision), as an operator or a lease expiry on the server would.
func (h *conformanceHarness) Invalidate(ctx context.Context, key string) error {
	resp, err := h.e.admin.Get(ctx, dir(key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	_, err = h.e.admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

// Config: etcd leases are whole seconds, and the server expires a lease on
// its leader's clock, up to about a second late under load.
func (h *conformanceHarness) Config() conformance.Config {
	return conformance.Config{MinTTL: 2 * time.Second, ExpirySlack: 2 * time.Second}
}

// TestConformance runs the public conformance suite against the etcd
// backend on a real 3-member cluster.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	conformance.Run(t, func(t *testing.T) conformance.Harness {
		return &conformanceHarness{e: e}
	})
}
