package conformance

import (
	"sync"
	"time"
)

// This file holds the suite's measure of scheduling delay and the waits
// that widen their bound by it: a loaded machine must not make a correct
// backend fail.

// lagMonitor measures scheduling delay while a property runs: how late a
// goroutine that sleeps lagTick wakes up. The checks bounded in time from
// above widen their allowance by what it measured (see [env.waitDone]), so
// that a loaded machine does not make a correct backend fail.
type lagMonitor struct {
	mu      sync.Mutex
	maxLate time.Duration
	peak    time.Duration // the largest lateness since startWindow
	ticks   uint64        // sleeps measured so far
	quit    chan struct{}
	done    chan struct{}
}

const lagTick = 5 * time.Millisecond

func startLagMonitor() *lagMonitor {
	m := &lagMonitor{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		timer := time.NewTimer(lagTick)
		defer timer.Stop()
		for {
			start := time.Now()
			timer.Reset(lagTick)
			select {
			case <-m.quit:
				return
			case <-timer.C:
			}
			late := time.Since(start) - lagTick
			m.mu.Lock()
			m.maxLate = max(m.maxLate, late)
			m.peak = max(m.peak, late)
			m.ticks++
			m.mu.Unlock()
		}
	}()
	return m
}

// max returns the largest lateness measured so far.
func (m *lagMonitor) max() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxLate
}

// settled returns the largest lateness measured so far once the monitor
// has measured two more sleeps (or after bound): a delay that has just
// held up the caller is then counted, since the monitor, held up as
// well, measures it when it next wakes. A check that finds a call slower
// than its bound asks for it before failing.
func (m *lagMonitor) settled(bound time.Duration) time.Duration {
	m.mu.Lock()
	want := m.ticks + 2
	m.mu.Unlock()
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		done := m.ticks >= want
		m.mu.Unlock()
		if done {
			break
		}
		time.Sleep(lagTick)
	}
	return m.max()
}

// startWindow starts a window of measurement: see [lagMonitor.window].
func (m *lagMonitor) startWindow() {
	m.mu.Lock()
	m.peak = 0
	m.mu.Unlock()
}

// window returns the largest lateness measured since startWindow, once
// the monitor has measured two more sleeps (see [lagMonitor.settled]).
func (m *lagMonitor) window() time.Duration {
	m.settled(time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

func (m *lagMonitor) stop() {
	close(m.quit)
	<-m.done
}

// waitDone waits until done is closed or bound passes, and reports whether it
// was done.
func waitDone(done <-chan struct{}, bound time.Duration) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

// schedAllowance absorbs scheduling delays (the race detector, a loaded CI
// machine) in the few checks bounded in time from above: a fixed part, and
// twice the largest scheduling lateness measured so far in the property.
func (e *env) schedAllowance() time.Duration {
	return max(500*time.Millisecond, e.ttl) + 2*e.lag.max()
}

// settledAllowance is schedAllowance once the lag monitor has measured a
// delay that may just have held up the caller (see [lagMonitor.settled]):
// what a check that found a call too slow compares it with before it
// fails.
func (e *env) settledAllowance() time.Duration {
	return max(500*time.Millisecond, e.ttl) + 2*e.lag.settled(time.Second)
}

// waitDone waits until done is closed or bound passes, and reports whether
// it was closed. When the scheduling lateness measured grows during the
// wait, the bound grows by twice the increase (the goroutines that should
// have closed done were delayed as much), once for each increase.
func (e *env) waitDone(done <-chan struct{}, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	seen := e.lag.max()
	for {
		if waitDone(done, time.Until(deadline)) {
			return true
		}
		now := e.lag.max()
		if now <= seen {
			return false
		}
		deadline = deadline.Add(2 * (now - seen))
		seen = now
	}
}
