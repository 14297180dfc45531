//go:build unix

package demo

import (
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// timeline prints events with the time since the demo started, in the
// order they happened: events come from several processes and goroutines,
// so each is held for reorderWindow and printed sorted by its time stamp.
type timeline struct {
	mu      sync.Mutex
	w       io.Writer
	start   time.Time
	seq     int
	pending []timelineEntry
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

type timelineEntry struct {
	at   time.Time
	seq  int
	line string
}

// reorderWindow is how long an event waits for earlier ones to arrive.
const reorderWindow = 25 * time.Millisecond

func newTimeline(w io.Writer) *timeline {
	t := &timeline{w: w, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
				t.emit(false)
			}
		}
	}()
	return t
}

func (t *timeline) say(who, format string, args ...any) {
	t.sayAt(time.Now(), who, format, args...)
}

func (t *timeline) sayAt(at time.Time, who, format string, args ...any) {
	line := fmt.Sprintf("+%7.3fs  %-8s  %s\n", at.Sub(t.start).Seconds(), who, fmt.Sprintf(format, args...))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		fmt.Fprint(t.w, line)
		return
	}
	t.seq++
	t.pending = append(t.pending, timelineEntry{at: at, seq: t.seq, line: line})
}

// emit prints the pending events older than reorderWindow (all of them if
// all is set), oldest first.
func (t *timeline) emit(all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sort.Slice(t.pending, func(i, j int) bool {
		a, b := t.pending[i], t.pending[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.seq < b.seq
	})
	n := 0
	for _, e := range t.pending {
		if !all && time.Since(e.at) < reorderWindow {
			break
		}
		fmt.Fprint(t.w, e.line)
		n++
	}
	t.pending = append(t.pending[:0], t.pending[n:]...)
}

// close prints every pending event; later events are printed at once.
// It is idempotent.
func (t *timeline) close() {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return
	}
	close(t.stop)
	<-t.done
	t.emit(true)
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
