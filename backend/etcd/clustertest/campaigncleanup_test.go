package clustertest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// cleanupFaults, once armed, loses the reply of every Proclaim (the Txn
// putting a leader record is applied, its caller told it failed) and
// refuses every release (a Txn deleting a queue entry is never sent).
type cleanupFaults struct {
	armed             atomic.Bool
	proclaims, refuse atomic.Int32
}

func (f *cleanupFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tr, ok := req.(*pb.TxnRequest)
	if !ok || !f.armed.Load() {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	for _, op := range tr.Success {
		if p := op.GetRequestPut(); p != nil && strings.Contains(string(p.Key), "/elections/") {
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			f.proclaims.Add(1)
			return errors.New("test: the Proclaim's reply was lost")
		}
		if d := op.GetRequestDeleteRange(); d != nil && strings.Contains(string(d.Key), "/locks/") {
			f.refuse.Add(1)
			return errors.New("test: the release was refused")
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestCampaignFailedCleanupHidesRecord: a Campaign whose Proclaim was
// applied but reported failed (its reply lost) releases its lease, and
// that release fails too. The leader record stays in etcd (a record
// outlives its term by design), but no term is reported for it: the
// Backend revokes the lease of a failed release in the background, which
// deletes the queue entry that the record's fence names, long before the
// lease's TTL. (If the revocation failed as well, the cluster being
// unreachable, the term would be reported until its lease expired: no
// request could reach the cluster sooner.)
func TestCampaignFailedCleanupHidesRecord(t *testing.T) {
	e := newEnv(t)
	var f cleanupFaults
	const long = 30 * time.Second // hidden within this by the revoke, not by expiry
	el := locktest.Open(t, e.countedBackend(1, grpc.WithChainUnaryInterceptor(f.intercept)), fencedlock.Options{TTL: long}, election.New)
	obs := locktest.Open(t, e.backend(2), fencedlock.Options{TTL: long}, election.New)
	ctx := ctxFor(t, time.Minute)
	const name = "svc-cleanup"

	f.armed.Store(true)
	if _, err := el.Campaign(ctx, name, []byte("v")); err == nil {
		t.Fatal("Campaign succeeded with its Proclaim's reply lost")
	}
	failed := time.Now()
	if f.proclaims.Load() != 1 || f.refuse.Load() < 1 {
		t.Fatalf("%d Proclaims applied and %d releases refused, want 1 and at least 1", f.proclaims.Load(), f.refuse.Load())
	}
	resp, err := e.admin.Get(ctx, etcd.DefaultKeyPrefix+"elections/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatal("no leader record: the lost Proclaim was not applied, the test tests nothing")
	}
	for {
		_, err := obs.Leader(ctx, name)
		if errors.Is(err, election.ErrNoLeader) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(failed) > long/2 {
			t.Fatalf("the failed Campaign's term still reported %v after it returned (lease TTL %v): its lease was not revoked", long/2, long)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the failed Campaign's record stays in etcd; its term is reported by no one %v after Campaign returned (TTL %v)", ms(time.Since(failed)), long)
}
