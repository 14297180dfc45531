package goredis

import (
	"github.com/fencedlock/fencedlock/internal/rediscore"
)

// Store is the fenced store of a Backend: a [fencing.Store] on Redis
// hashes of yours, the same type in backend/redis. Get, Set and Update
// are those of [fencing.Store]; HSet sets several fields under the guard.
// A key is a hash holding the value in field [ValueField] and the fence
// record in [FenceField] and [HolderField]; keys inside the backend's
// KeyPrefix are refused. Every write is one script on one key, so it
// works on Redis Cluster for any key. A key that is not a hash returns
// the server's WRONGTYPE error and changes nothing.
type Store = rediscore.Store

// NewStore returns the fenced store of b. It sends nothing; it is closed
// with b.
func NewStore(b *Backend) *Store { return b.store }
