package rediscore

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// slotScript is slot_acquire.lua. Not Again: the script is not sent a
// second time by the adapter (an owner whose first request was applied
// gets its own slot again anyway; nothing relies on a resend).
var slotScript = NewScript(redisscript.SlotAcquireLua)

// SlotsInOneStep reports whether AcquireSlot can take from keys: not with
// WaitReplicas (WAIT confirms a script's integer reply only), and on a
// Redis Cluster (cluster) only if every lock key hashes to one slot, which
// the keys of a semaphore never do: each lock key is its own hash tag.
func (b *Backend) SlotsInOneStep(cluster bool, keys []string) bool {
	if b.opts.WaitReplicas > 0 || len(keys) == 0 {
		return false
	}
	if !cluster {
		return true
	}
	first := HashSlot(redisscript.LockKey(b.opts.KeyPrefix, keys[0]))
	for _, k := range keys[1:] {
		if HashSlot(redisscript.LockKey(b.opts.KeyPrefix, k)) != first {
			return false
		}
	}
	return true
}

// AcquireSlot makes one attempt to take the first free of keys for
// req.Owner (slot_acquire.lua, one round trip): see
// [driver.SlotAcquirer]. fair: a free key whose fair queue has waiters is
// left to them, as AcquireFair leaves it.
func (b *Backend) AcquireSlot(ctx context.Context, req driver.AcquireRequest, keys []string, fair bool) (int, driver.Grant, error) {
	const op = "acquire slot"
	if len(keys) == 0 {
		return 0, driver.Grant{}, fmt.Errorf("redis: %s: no keys: %w", op, driver.ErrInvalid)
	}
	if b.c.Closed() {
		return 0, driver.Grant{}, redisscript.ErrClosed(op, keys[0])
	}
	if b.opts.WaitReplicas > 0 {
		return 0, driver.Grant{}, fmt.Errorf("redis: %s %q: not with WaitReplicas (see SlotsInOneStep): %w", op, keys[0], driver.ErrInvalid)
	}
	c := &Call{Keys: make([]string, 0, 4*len(keys))}
	for _, k := range keys {
		lk := redisscript.LockKey(b.opts.KeyPrefix, k)
		c.Keys = append(c.Keys, lk, lk+redisnames.FenceSuffix, lk+redisnames.AbandonedSuffix)
		if fair { // the queue only where it is read
			c.Keys = append(c.Keys, lk+redisnames.QueueSuffix)
		}
	}
	ttl := b.ttl.Get(req.TTL)
	c.args[0], c.args[1] = req.Owner, ttl.S
	if fair {
		c.args[2] = "fair"
	}
	c.Args = c.args[:3]
	_, vals, err := b.c.EvalInts(ctx, slotScript, c)
	if err != nil {
		return 0, driver.Grant{}, b.c.Wrap(op, keys[0], err)
	}
	if len(vals) != 2 || vals[0] >= int64(len(keys)) {
		return 0, driver.Grant{}, fmt.Errorf("redis: %s %q: unexpected reply %v", op, keys[0], vals)
	}
	if vals[0] < 0 {
		return 0, driver.Grant{}, redisscript.Held(keys[0], -vals[1])
	}
	i := int(vals[0])
	req.Key = keys[i]
	g := redisscript.Grant(req, vals[1], ttl)
	g.Data = b.newCall(req.Key) // the slot's names, for the lease's Renew and Release
	return i, g, nil
}
