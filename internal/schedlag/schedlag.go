// Package schedlag measures how late the test process is scheduled: a
// goroutine sleeps Tick in a loop and records how much longer than Tick
// each sleep took. On a loaded machine (the race detector, other tests,
// a busy CI host) everything in the process, and the servers and
// binaries it drives, is delayed alike; a test widens a bounded wait
// (the conformance suite) or sizes a retry (internal/clitest) by what
// the monitor measured, so that a loaded machine does not fail correct
// code.
package schedlag

import (
	"sync"
	"time"
)

// Tick is how long the monitor's goroutine sleeps between two
// measurements.
const Tick = 5 * time.Millisecond

// Monitor measures scheduling lateness from Start until Stop. Its
// methods may be called from any goroutine.
type Monitor struct {
	mu      sync.Mutex
	maxLate time.Duration
	peak    time.Duration // the largest lateness since StartWindow
	ticks   uint64        // sleeps measured so far
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Start starts a monitor; the caller must Stop it.
func Start() *Monitor {
	m := &Monitor{quit: make(chan struct{}), done: make(chan struct{})}
	go m.run(time.Now())
	return m
}

// run measures until Stop. Each interval runs from one wake-up to the
// next (the clock is read when the goroutine runs, not at the timer's
// own time: the delay is the one to running), so the intervals cover
// the whole run and a delay anywhere in the loop is measured. The first
// runs from start, Start's call: read when the goroutine first ran, a
// delay before that (a loaded machine that ran Start's caller on and
// stopped the process before the new goroutine's turn) was not measured.
func (m *Monitor) run(start time.Time) {
	defer close(m.done)
	timer := time.NewTimer(Tick)
	defer timer.Stop()
	for last := start; ; {
		select {
		case <-m.quit:
			return
		case <-timer.C:
		}
		now := time.Now()
		timer.Reset(Tick)
		late := now.Sub(last) - Tick
		last = now
		m.mu.Lock()
		m.maxLate = max(m.maxLate, late)
		m.peak = max(m.peak, late)
		m.ticks++
		m.mu.Unlock()
	}
}

// Stop stops the measurement and waits for the monitor's goroutine to
// end. What was measured stays readable; a second Stop does nothing.
func (m *Monitor) Stop() {
	m.once.Do(func() { close(m.quit) })
	<-m.done
}

// Max returns the largest lateness measured so far.
func (m *Monitor) Max() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxLate
}

// Settled returns the largest lateness measured so far once the monitor
// has measured two more sleeps (or after bound, or at once when it is
// stopped): a delay that has just held up the caller is then counted,
// since the monitor, held up as well, measures it when it next wakes. A
// check that finds a call slower than its bound asks for it before
// failing.
func (m *Monitor) Settled(bound time.Duration) time.Duration {
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
		select {
		case <-m.done:
			return m.Max()
		case <-time.After(Tick):
		}
	}
	return m.Max()
}

// StartWindow starts a window of measurement: see [Monitor.Window].
func (m *Monitor) StartWindow() {
	m.mu.Lock()
	m.peak = 0
	m.mu.Unlock()
}

// Window returns the largest lateness measured since StartWindow, once
// the monitor has measured two more sleeps (see [Monitor.Settled], with
// a bound of a second).
func (m *Monitor) Window() time.Duration {
	m.Settled(time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}
