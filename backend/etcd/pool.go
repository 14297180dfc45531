package etcd

// The lease pool: leases granted ahead of time (by earlier acquisitions)
// and reused, so that an acquire is one Txn and a release one Txn, with no
// LeaseGrant or LeaseRevoke (each a Raft proposal) on the way. Every lock
// still has a lease of its own while it is held: losing one lock never
// takes another with it.
//
// Invariants of the pool:
//   - An idle lease carries no key. A lease enters the pool only after a
//     Txn whose answer proves it carries none: a Release Txn that deleted
//     our key (the only key ever put on that lease), or an Acquire Txn that
//     put nothing. A lease whose key may remain (a Txn that failed, or whose
//     outcome is unknown, or a Release that found the key already gone, so
//     the lease may be dying) is revoked, never pooled.
//   - A lease is in the hands of one holder at a time: taken out of the
//     pool under its lock, and returned (or revoked) at most once per grant
//     (grant.retire). Once a grant has given its lease back, nothing done
//     with that grant (a second Release, a late clean-up) revokes it.
//   - A pooled lease's sent time is the send time of a request the server
//     confirmed (LeaseGrant or keepalive) that set its expiry, never later.
//     A lease idle for less than TTL/poolFresh is handed out as is; an
//     older one is first renewed with one keepalive (on the shared streams:
//     no Raft proposal); one idle for its whole TTL may have expired and is
//     dropped. So a grant's Sent is at most TTL/poolFresh older than a fresh
//     LeaseGrant's would be.
//   - Leases are pooled by the TTL asked for, in whole seconds: a lease is
//     reused only for the TTL it was granted for.
//   - An idle lease revoked by someone else makes the next Txn fail with
//     "lease not found" without applying it; the acquire then starts again
//     with a newly granted lease.
//   - Close revokes every idle lease; leases still held are not revoked
//     (Close does not release locks).

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// poolFresh: a lease idle for less than TTL/poolFresh is reused without
	// a renewal.
	poolFresh = 10
	// poolMaxIdle bounds the idle leases of one TTL; a lease returned to a
	// full pool is revoked.
	poolMaxIdle = 4096
	// poolCloseConc is the number of revocations Close runs at once.
	poolCloseConc = 16
	// poolScan is how many of the most recently returned idle leases a
	// take searches for one last used on the same lock.
	poolScan = 256
)

// pooledLease is a lease out of or in the pool.
type pooledLease struct {
	id   clientv3.LeaseID
	ttl  time.Duration // the TTL the server applied
	sent time.Time     // send time of the last confirmed request that set its expiry
	dir  string        // the queue directory of the lock it last carried a key of
}

// leasePool holds the idle leases of a Backend, by requested TTL.
type leasePool struct {
	mu     sync.Mutex
	closed bool
	idle   map[int64][]pooledLease // by TTL in seconds; the newest last
}

// pop removes an idle lease of secs: among the poolScan most recently
// returned, the newest last used on the lock of dir, else the newest. A
// lease used again on the same lock puts its key under the same name
// (entry), which keeps the names etcd indexes in a directory (and every
// read of the queue visits, until compaction) few.
func (p *leasePool) pop(secs int64, dir string) (pooledLease, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.idle[secs]
	if len(q) == 0 {
		return pooledLease{}, false
	}
	i := len(q) - 1
	for j := i; j >= 0 && j >= len(q)-poolScan; j-- {
		if q[j].dir == dir {
			i = j
			break
		}
	}
	l := q[i]
	copy(q[i:], q[i+1:])
	p.idle[secs] = q[:len(q)-1]
	return l, true
}

// push returns l to the pool of secs. It reports false when the pool is
// closed or full: the caller revokes l.
func (p *leasePool) push(secs int64, l pooledLease) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.idle == nil {
		p.idle = make(map[int64][]pooledLease)
	}
	q := p.idle[secs]
	// Leases idle for their whole TTL may have expired: drop them from the
	// old end (they carry no key; the server expires them).
	now := time.Now()
	n := 0
	for n < len(q) && now.Sub(q[n].sent) >= q[n].ttl {
		n++
	}
	q = q[n:]
	if len(q) >= poolMaxIdle {
		p.idle[secs] = q
		return false
	}
	p.idle[secs] = append(q, l)
	return true
}

// drain closes the pool and returns its idle leases.
func (p *leasePool) drain() []pooledLease {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var all []pooledLease
	for _, q := range p.idle {
		all = append(all, q...)
	}
	p.idle = nil
	return all
}

// takeLease returns a lease of secs seconds that carries no key, for the
// lock of dir: unless grant is set, an idle one from the pool, preferably
// one last used on the same lock (renewed first if it has been
// idle for TTL/poolFresh or more), else a newly granted one (reused false).
func (b *Backend) takeLease(ctx context.Context, secs int64, dir string, grant bool) (l pooledLease, reused bool, err error) {
	for !grant {
		l, ok := b.pool.pop(secs, dir)
		if !ok {
			break
		}
		age := time.Since(l.sent)
		if age >= l.ttl {
			continue // may have expired: the server drops it
		}
		if age < l.ttl/poolFresh {
			return l, true, nil
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, l.ttl-age)
		ttl, err := b.ka.renew(rctx, l.id)
		cancel()
		if err == nil {
			l.sent, l.ttl = sent, time.Duration(ttl)*time.Second
			return l, true, nil
		}
		if ctx.Err() != nil {
			b.returnLease(secs, l) // still carries no key
			return pooledLease{}, false, ctx.Err()
		}
		// Gone (revoked) or not renewable now: drop it; it carries no key
		// and expires with its TTL. Grant a new one below.
		break
	}
	sent := time.Now()
	lg, err := b.c.Grant(ctx, secs)
	if err != nil {
		return pooledLease{}, false, err
	}
	return pooledLease{id: lg.ID, ttl: time.Duration(lg.TTL) * time.Second, sent: sent, dir: dir}, false, nil
}

// returnLease puts l, which carries no key, back in the pool of secs, or
// revokes it in the background if the pool is closed or full. The caller
// runs inside b.wg.
func (b *Backend) returnLease(secs int64, l pooledLease) {
	if b.pool.push(secs, l) {
		return
	}
	b.revokeAsync(l.id)
}

// revokeAsync revokes id in the background; Close waits for it. The
// caller runs inside b.wg, so the counter is not zero.
func (b *Backend) revokeAsync(id clientv3.LeaseID) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		_ = b.revoke(id)
	}()
}

// closePool revokes every idle lease, poolCloseConc at a time, each bounded
// by CleanupTimeout.
func (b *Backend) closePool() {
	idle := b.pool.drain()
	sem := make(chan struct{}, poolCloseConc)
	var wg sync.WaitGroup
	for _, l := range idle {
		if time.Since(l.sent) >= l.ttl+time.Second {
			continue // expired already
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = b.revoke(l.id)
		}()
	}
	wg.Wait()
}
