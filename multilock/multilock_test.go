package multilock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/multilocktest"
	"github.com/fencedlock/fencedlock/multilock"
)

// memorySetup runs the scenarios on one memory.Store.
func memorySetup() multilocktest.Setup {
	st := memory.NewStore()
	return multilocktest.Setup{
		New: func(t *testing.T) multilocktest.Backend {
			b := st.Backend()
			t.Cleanup(func() { b.Close() })
			return b
		},
		Delete: func(t *testing.T, key string) {
			if !st.Invalidate(key) {
				t.Fatalf("Invalidate %q: not held", key)
			}
		},
	}
}

func TestMemory(t *testing.T) { multilocktest.Run(t, memorySetup()) }

func TestInvalidSets(t *testing.T) {
	m, err := multilock.New(memory.New(), fencedlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	many := make([]string, multilock.MaxKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%02d", i)
	}
	for name, keys := range map[string][]string{
		"empty":     nil,
		"duplicate": {"a", "b", "a"},
		"empty key": {"a", ""},
		"too many":  many,
		"too long":  {strings.Repeat("x", 600), strings.Repeat("y", 600)},
	} {
		if _, err := m.TryAcquire(context.Background(), keys); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := m.TryAcquire(context.Background(), many[:multilock.MaxKeys]); err != nil {
		t.Errorf("MaxKeys keys: %v", err)
	}
}

// notMulti is a backend without sets.
type notMulti struct{ driver.Backend }

func TestNewNeedsMultiLocker(t *testing.T) {
	if _, err := multilock.New(notMulti{memory.New()}, fencedlock.Options{}); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("New on a backend without sets: %v, want ErrInvalid", err)
	}
}
