package clustertest

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/locktest"
	"github.com/fencedlock/fencedlock/internal/rwlocktest"
	"github.com/fencedlock/fencedlock/rwlock"
)

// TestRWLock runs the scenarios of internal/rwlocktest on the etcd
// backend: each RWLock on its own client of the next member, the fenced
// store on member 0. Waiters are woken by releases (the Backend is a
// driver.Notifier).
func TestRWLock(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, rwlocktest.Setup)
	}{
		{"ModesExclude", rwlocktest.ModesExclude},
		{"NeverReaderAndWriter", func(t *testing.T, s rwlocktest.Setup) { rwlocktest.NeverReaderAndWriter(t, s, 6, 15) }},
		{"WriterNotStarved", rwlocktest.WriterNotStarved},
		{"PausedWriterRefused", rwlocktest.PausedWriterRefused},
		{"CancelledWriterLeavesNothing", rwlocktest.CancelledWriterLeavesNothing},
		{"CancelledWriterWakesReaders", rwlocktest.CancelledWriterWakesReaders},
		{"CrashedWriterIntentExpires", rwlocktest.CrashedWriterIntentExpires},
		{"Inspect", rwlocktest.Inspect},
	}
	e := newEnv(t)
	n := 0
	next := func() *etcd.Backend {
		n++
		return e.backend(n % len(e.clus.Members))
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, rwlocktest.Setup{
				New: func(t *testing.T, opts fencedlock.Options) *rwlock.RWLock {
					if opts.TTL == 0 {
						opts.TTL = ttl
					}
					return locktest.Open(t, next(), opts, rwlock.New)
				},
				Backend:     func(*testing.T) driver.RWLocker { return next() },
				Store:       etcd.NewFencedStore(e.backend(0)),
				TTL:         ttl,
				Intent:      2 * time.Second,
				ExpirySlack: 2 * time.Second, // etcd expires leases on its leader's clock, in whole seconds
			})
		})
	}
}
