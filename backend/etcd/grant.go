package etcd

import (
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// grant is the private data of a Grant (Grant.Data).
type grant struct {
	name  string           // our etcd key
	lease clientv3.LeaseID // our lease, attached to name only
	rev   int64            // create revision of name: the fence
	held  int64            // revision at which we were known to hold the lock
	ttl   time.Duration    // the TTL the server applied
	renew time.Duration    // the keepalive interval asked for (AcquireRequest.RenewInterval); 0: ttl/3
	secs  int64            // the TTL asked for, in seconds: the lease's pool; 0: never pooled

	mu       sync.Mutex
	lastSent time.Time // send time of the last request that set the lease's expiry
	retired  bool      // the lease was returned to the pool or is being revoked
}

// interval is how often g's lease is kept alive: the interval asked for,
// if it is shorter than the TTL the server applied (which may be longer
// than the one asked for: whole seconds, etcd's minimum), else TTL/3; at
// least 10ms.
func (g *grant) interval() time.Duration {
	iv := g.ttl / 3
	if g.renew > 0 && g.renew < g.ttl {
		iv = g.renew
	}
	return max(iv, 10*time.Millisecond)
}

// retire claims the end of g's lease for the caller, who then pools or
// revokes it; false if it was already claimed (a second Release): the
// lease may now be another grant's and must not be touched.
func (g *grant) retire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.retired {
		return false
	}
	g.retired = true
	return true
}

func (g *grant) sent() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastSent
}

func (g *grant) renewed(sent time.Time) {
	g.mu.Lock()
	if sent.After(g.lastSent) {
		g.lastSent = sent
	}
	g.mu.Unlock()
}
