package fencedlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// The local deadline of a lease is kept on two timebases, and a lease is
// valid only while both are before it:
//
//   - Go's monotonic clock (time.Now), which the watchdog's timers run on;
//   - the same clock plus the time the system spent suspended, as the
//     server's TTL counts it. On Linux Go's monotonic clock is
//     CLOCK_MONOTONIC, which stops during a suspend: a lease checked on it
//     alone would still look valid after a suspend longer than its
//     remaining time. The suspended time is CLOCK_BOOTTIME less
//     CLOCK_MONOTONIC, read from the kernel (clock_linux.go). Elsewhere it
//     is taken as zero (clock_other.go; see the package documentation).
//
// Each point that decides validity reads a stamp. The exact one (exact:
// CLOCK_BOOTTIME, one system call; and CLOCK_MONOTONIC too when the former
// ran ahead of Go's clock) is read where the watchdog ticks and where a
// KeepAliver's renewal arrives. Lease.Err, Lease.Deadline and a grant's
// hand-out read the cheap one (now): Go's time.Now, whose wall clock a
// suspend moves ahead of its monotonic clock; only when the two drifted
// apart by more than markStep since the last exact reading (a suspend, or
// a step of the wall clock) are the kernel's clocks read. A wall-clock
// step back that cancels a suspend within markStep hides it from Err and
// from the hand-out until the watchdog's next tick (at the next renewal
// or the deadline), which ends the lease without renewing it. The
// hand-out read the exact stamp until issue 36: on a virtual machine the
// system call (1.5 µs idle, more under load) cost about a tenth of the
// concurrency-64 throughput, for a blind spot only that coincidence opens.

// stamp is one reading of both timebases.
type stamp struct {
	mono time.Time
	boot int64 // ns since the clock was made, counting the suspended time seen
}

// clock reads stamps for one Locker. It also converts a send time that a
// backend measured on Go's monotonic clock alone (Grant.Sent, a
// KeepAliver's Renewal.Sent) to a stamp, never later than it was: the
// suspended time it adds is the one already seen at a reading no later
// than that send time.
type clock struct {
	// boot and mono read the kernel's CLOCK_BOOTTIME and CLOCK_MONOTONIC
	// in ns (bootClock, monoClock), wall the wall clock of a time.Now
	// reading (its UnixNano); tests replace them with clocks that jump.
	boot, mono func() int64
	wall       func(time.Time) int64
	mono0      time.Time // Go's monotonic clock when the clock was made
	wall0      int64     // wall(mono0)
	boot0      int64     // boot() then
	susp0      int64     // boot() - mono() then, never less than it was

	drift atomic.Int64 // wall less Go's monotonic clock at the last exact reading, from mono0
	seen  atomic.Int64 // the suspended time seen since the clock was made, ns
	mu    sync.Mutex
	marks []suspendMark // when the suspended time was seen to grow, in order
}

// suspendMark: from at on, at least susp ns were spent suspended since the
// clock was made.
type suspendMark struct {
	at   time.Time
	susp int64
}

// markStep is how much the suspended time, or the drift of the wall clock,
// must grow to count: less is noise (the clocks are not read at one
// instant), and ignoring it errs early, never late. A system suspend lasts
// far longer.
const markStep = int64(time.Millisecond)

func newClock(boot, mono func() int64, wall func(time.Time) int64) *clock {
	c := &clock{boot: boot, mono: mono, wall: wall}
	k := mono()
	c.boot0 = boot()
	c.susp0 = c.boot0 - k // boot read last: the baseline errs high
	c.mono0 = time.Now()
	c.wall0 = wall(c.mono0)
	return c
}

// unixNano is the wall clock of a time.Now reading.
func unixNano(t time.Time) int64 { return t.UnixNano() }

// now reads a stamp cheaply: the kernel's clocks only if the wall clock
// moved against Go's monotonic clock since the last exact reading.
func (c *clock) now() stamp {
	m := time.Now()
	if d := c.driftAt(m) - c.drift.Load(); d > markStep || d < -markStep {
		return c.exact()
	}
	return c.stampAt(m)
}

// exact reads CLOCK_BOOTTIME and, if it ran ahead of Go's monotonic clock,
// CLOCK_MONOTONIC, to record the suspended time if it grew (the kernel's
// monotonic clock tells a suspend from a Go clock that is not the
// kernel's: the fake one of a testing/synctest bubble); then a stamp.
func (c *clock) exact() stamp {
	b := c.boot()
	m := time.Now()
	c.drift.Store(c.driftAt(m))
	if (b-c.boot0)-int64(m.Sub(c.mono0)) > c.seen.Load()+markStep {
		k := c.mono() // after b: the suspended time errs low
		m = time.Now()
		if susp := b - k - c.susp0; susp > c.seen.Load()+markStep {
			c.mu.Lock()
			if susp > c.seen.Load()+markStep {
				// m was read after the kernel's clocks: the suspend
				// lies before it.
				c.marks = append(c.marks, suspendMark{at: m, susp: susp})
				c.seen.Store(susp)
			}
			c.mu.Unlock()
		}
	}
	return c.stampAt(m)
}

func (c *clock) driftAt(m time.Time) int64 { return (c.wall(m) - c.wall0) - int64(m.Sub(c.mono0)) }

func (c *clock) stampAt(m time.Time) stamp {
	return stamp{mono: m, boot: int64(m.Sub(c.mono0)) + c.seen.Load()}
}

// at returns the stamp of a moment m measured on Go's monotonic clock only
// (a backend's send time): m plus the suspended time seen at the last
// reading no later than m, so it is never later than the true one
// (provided m is after the clock was made: a suspend before that is not
// counted).
func (c *clock) at(m time.Time) stamp {
	var susp int64
	if c.seen.Load() > 0 {
		c.mu.Lock()
		for i := len(c.marks) - 1; i >= 0; i-- {
			if !c.marks[i].at.After(m) {
				susp = c.marks[i].susp
				break
			}
		}
		c.mu.Unlock()
	}
	return stamp{mono: m, boot: int64(m.Sub(c.mono0)) + susp}
}
