package etcdtest

import (
	"testing"

	"github.com/fencedlock/fencedlock/internal/rwinspecttest"
)

// TestEtcdInspectReadWrite, on an in-process 3-member etcd cluster:
// inspect and list show two `run --read` holders and a waiting `run
// --write`, then the writer (etcd stores holder ids only, never owner
// tokens; it keeps no last fence of a free read-write lock).
func TestEtcdInspectReadWrite(t *testing.T) {
	_, eps, _ := cluster(t)
	rwinspecttest.Run(t, rwinspecttest.Setup{Bin: &bin, Env: []string{"FENCEDLOCK_ETCD=" + eps}}, "cfg")
}
