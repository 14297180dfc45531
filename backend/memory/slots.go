package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/driver"
)

var _ driver.SlotAcquirer = (*Backend)(nil)

// AcquireSlot implements [driver.SlotAcquirer]: under the Store's lock,
// the key the owner already holds (its lease set to req.TTL), else the
// first free key, taken as Acquire takes it.
func (b *Backend) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string) (int, driver.Grant, error) {
	if err := b.usable(ctx); err != nil {
		return 0, driver.Grant{}, err
	}
	if req.TTL <= 0 || len(keys) == 0 {
		return 0, driver.Grant{}, fmt.Errorf("memory: acquire slot: TTL %v, %d keys: %w", req.TTL, len(keys), driver.ErrInvalid)
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	free, least := -1, time.Duration(0)
	for i, k := range keys {
		e, ok := s.live(k, now)
		switch {
		case ok && e.owner == req.Owner:
			e.expires = now.Add(req.TTL)
			s.locks[k] = e
			return i, driver.Grant{Key: k, Owner: req.Owner, Fence: e.fence, TTL: req.TTL}, nil
		case !ok && free < 0:
			free = i
		case ok && (least == 0 || e.expires.Sub(now) < least):
			least = e.expires.Sub(now)
		}
	}
	if free < 0 {
		return 0, driver.Grant{}, &driver.HeldError{Key: keys[0], RetryAfter: least}
	}
	req.Key = keys[free]
	return free, s.grant(req, now), nil
}

// SlotsInOneStep reports true: the Store takes any keys under one lock.
func (b *Backend) SlotsInOneStep(keys []string) bool { return len(keys) > 0 }
