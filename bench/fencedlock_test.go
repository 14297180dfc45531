package bench

import (
	"context"

	"github.com/fencedlock/fencedlock"
)

// fencedClient adapts a fencedlock.Locker (any backend). *fencedlock.Lease
// is a heldLock as it is.
type fencedClient struct {
	l           *fencedlock.Locker
	closeClient func() // closes the backend, then its client
}

func (f *fencedClient) acquire(ctx context.Context, key string) (heldLock, error) {
	ls, err := f.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return ls, nil
}

func (f *fencedClient) close() {
	_ = f.l.Close()
	f.closeClient()
}
