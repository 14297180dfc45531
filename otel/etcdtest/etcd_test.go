package otelfencedlock_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/backend/etcd/clustertest/harness"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
)

func TestMain(m *testing.M) {
	harness.Setup("otelfencedlock")
	os.Exit(m.Run())
}

// etcdStore runs the scenarios on an in-process etcd member (a
// WaitAcquirer: waiters queue on the server, and a queued waiter that is
// granted the key is a hand-off).
func etcdStore(t *testing.T) store {
	harness.NoSkip(t, "otelfencedlock")
	integration.BeforeTest(t, integration.WithoutGoLeakDetection())
	clus := integration.NewCluster(t, &integration.ClusterConfig{Size: 1})
	t.Cleanup(func() { clus.Terminate(t) })
	client := func(t *testing.T) *clientv3.Client {
		c, err := clus.NewClientV3(0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := client(t)
	return store{
		name: "etcd",
		backend: func(t *testing.T) driver.Backend {
			b, err := etcd.New(client(t), etcd.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
		del: func(t *testing.T, key string) {
			// The lock's whole queue, as `etcdctl del --prefix` would.
			resp, err := admin.Delete(context.Background(), etcd.DefaultKeyPrefix+"locks/"+url.PathEscape(key)+"/", clientv3.WithPrefix())
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("delete %q: %v, %v", key, resp, err)
			}
		},
		waitKind:    locktrace.WaitQueued,
		waitsBefore: 1,
		ttl:         3 * time.Second,
	}
}

func TestEtcdHandOff(t *testing.T) { handOff(t, etcdStore(t)) }

func TestEtcdLostByDel(t *testing.T) { lostByDel(t, etcdStore(t)) }
