package otelfencedlock_test

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/tests/v3/framework/integration"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "otelfencedlock: refusing -short: the etcd framework would skip the etcd tests")
		os.Exit(2)
	}
	// As in backend/etcd/clustertest: 300 ms elections keep a loaded
	// 2-core machine running -race from changing leaders spuriously.
	integration.ElectionTicks = 30
	os.Exit(m.Run())
}

// etcdStore runs the scenarios on an in-process etcd member (a
// WaitAcquirer: waiters queue on the server, and a queued waiter that is
// granted the key is a hand-off).
func etcdStore(t *testing.T) store {
	t.Cleanup(func() {
		if t.Skipped() {
			t.Errorf("the etcd framework skipped %s; skipping is not allowed", t.Name())
		}
	})
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
		waitKind:    fencedlock.WaitQueued,
		waitsBefore: 1,
		ttl:         3 * time.Second,
	}
}

func TestEtcdHandOff(t *testing.T) { handOff(t, etcdStore(t)) }

func TestEtcdLostByDel(t *testing.T) { lostByDel(t, etcdStore(t)) }
