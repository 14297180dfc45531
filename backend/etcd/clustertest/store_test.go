package clustertest

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/internal/storetest"
)

// TestFencedStore runs the program shared by every backend's fenced store
// (internal/storetest) on etcd: only the constructors differ from memory's.
func TestFencedStore(t *testing.T) {
	e := newEnv(t)
	locker, b := e.locker(0, fencedlock.Options{})
	storetest.Run(t, locker, etcd.NewFencedStore(b))
}
