package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/fencing"
)

// TestLostLeaseErrorOneLine: when fn fails and the lease was lost, Do's
// error carries both (errors.Is finds either) and prints on one line, for
// one-line log parsing.
func TestLostLeaseErrorOneLine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := memory.NewStore()
	l, err := fencedlock.New(store.Backend(), fencedlock.Options{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stale := &fencing.StaleError{Token: 4, Accepted: 6}
	err = l.Do(ctx, "orders", func(ctx context.Context, _ *fencedlock.Lease) error {
		store.Invalidate("orders") // the next renewal finds the key gone
		<-ctx.Done()
		return fmt.Errorf("write: %w", stale)
	})
	if !errors.Is(err, fencedlock.ErrLeaseLost) || !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Do: %v, want both ErrLeaseLost and fencing.ErrStale", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("Do's error prints on more than one line:\n%s", err)
	}
	t.Logf("Do: %v", err)
}
