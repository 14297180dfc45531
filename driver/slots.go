package driver

import "context"

// SlotAcquirer is implemented by backends that can take the first free of
// several keys in one step (one round trip on Redis): package semaphore
// uses it to take a permit, one slot key of which is the permit's lock,
// without trying the slots one request at a time.
//
// Besides the [Backend] contract on each key, a SlotAcquirer must
// guarantee:
//
//   - AcquireSlot takes at most one key, and only a key no other owner
//     holds, atomically with the check: as Acquire would for that key
//     (with the same fence counter, so fences of a key grow whichever of
//     Acquire and AcquireSlot granted them, and with every check Acquire
//     makes on that key);
//   - it takes the first free key in the order given;
//   - an owner that already holds one of the keys gets that key again (its
//     fence, its lease set to the TTL), never a second one;
//   - a lease it grants is renewed and released by Renew and Release of
//     the returned Grant, as any lease of that key.
type SlotAcquirer interface {
	// AcquireSlot makes one attempt to take the first free of keys (1 to
	// 1024 keys, each validated as a key) for req.Owner with a lease of
	// req.TTL; req.Key is ignored. It returns the index in keys of the key
	// taken and its Grant, whose Key is that key. If every key is held by
	// another owner it returns an error wrapping [ErrNotAcquired],
	// preferably a *[HeldError] whose RetryAfter is the shortest remaining
	// TTL of the holders; so too, with RetryAfter 0, when a free key is left
	// to the waiters of its fair queue (as Acquire leaves it). RetryAfter 0
	// means unknown (Redis also reports it for a holder in its last
	// millisecond): the caller polls. After an error of unknown outcome the caller
	// sends a Release of Key and Owner (Fence 0) for every one of keys.
	AcquireSlot(ctx context.Context, req AcquireRequest, keys []string) (int, Grant, error)

	// SlotsInOneStep reports whether AcquireSlot can take from keys (a
	// Redis Cluster can run one script only on keys of one hash slot).
	// When it is false the caller takes the keys one Acquire at a time.
	SlotsInOneStep(keys []string) bool
}
