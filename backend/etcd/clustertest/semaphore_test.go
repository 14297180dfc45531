package clustertest

import (
	"testing"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"github.com/fencedlock/fencedlock/internal/semaphoretest"
	"github.com/fencedlock/fencedlock/semaphore"
)

// semaphoreSetup runs the scenarios of internal/semaphoretest on the etcd
// backend: each Semaphore on its own client of the next member, the fenced
// store on member 0. Waiters are woken by releases (the Backend is a
// driver.Notifier).
func (e *env) semaphoreSetup() semaphoretest.Setup {
	return semaphoretest.Setup{
		New:   opener(e, 0, semaphore.New),
		Store: etcd.NewFencedStore(e.backend(0)),
		TTL:   ttl,
		FIFO:  true,
	}
}

func TestSemaphoreLimitNeverExceeded(t *testing.T) {
	semaphoretest.LimitNeverExceeded(t, newEnv(t).semaphoreSetup(), 3, 6, 5)
}

func TestSemaphoreLimitsDisagree(t *testing.T) {
	semaphoretest.LimitsDisagree(t, newEnv(t).semaphoreSetup(), 2, 4, 6, 5)
}

func TestSemaphoreLowerLimitWaitsForLowSlots(t *testing.T) {
	semaphoretest.LowerLimitWaitsForLowSlots(t, newEnv(t).semaphoreSetup())
}

func TestSemaphorePausedHolderWriteRefused(t *testing.T) {
	semaphoretest.PausedHolderWriteRefused(t, newEnv(t).semaphoreSetup())
}

func TestSemaphoreCrashedPermitReturns(t *testing.T) {
	semaphoretest.CrashedPermitReturns(t, newEnv(t).semaphoreSetup())
}

func TestSemaphoreCancelledAcquireLeavesNothing(t *testing.T) {
	semaphoretest.CancelledAcquireLeavesNothing(t, newEnv(t).semaphoreSetup())
}

func TestSemaphoreReleaseWakesWaiter(t *testing.T) {
	semaphoretest.ReleaseWakesWaiter(t, newEnv(t).semaphoreSetup())
}

func TestSemaphoreWaitersInOrder(t *testing.T) {
	semaphoretest.WaitersInOrder(t, newEnv(t).semaphoreSetup(), 5)
}
