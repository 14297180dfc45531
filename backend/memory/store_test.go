package memory_test

import (
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/storetest"
)

// TestFencedStore runs the program shared by every backend's fenced store.
func TestFencedStore(t *testing.T) {
	locker, err := fencedlock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	storetest.Run(t, locker, memory.NewFencedStore())
}
