//go:build unix

package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
)

// logQueueMax bounds the bytes a logQueue holds for its writer.
const logQueueMax = 64 << 10

// logFlushTimeout bounds how long run and the supervisor wait, as they
// exit, for their last messages to be written.
const logFlushTimeout = 500 * time.Millisecond

// logQueue is the standard error of run and of the supervisor while
// COMMAND runs: a Write never blocks. The bytes go to a bounded queue that
// a goroutine writes out; what does not fit is dropped and counted, and the
// count is written once the queue drains. Standard error may be a pipe
// nobody reads (a log shipper that is down, a stuck tee, Ctrl-S on a
// terminal): a message must never delay a signal or a deadline.
type logQueue struct {
	w    io.Writer
	mu   sync.Mutex
	buf  []byte
	lost int  // messages dropped since the last report
	busy bool // the goroutine holds bytes it has not written yet
	wake chan struct{}
	idle chan struct{} // closed and replaced when the queue is empty and not busy
}

func newLogQueue(w io.Writer) *logQueue {
	q := &logQueue{w: w, wake: make(chan struct{}, 1), idle: make(chan struct{})}
	go q.loop()
	return q
}

// Write queues p (a whole message) or drops it if the queue is full. It
// never blocks and never fails.
func (q *logQueue) Write(p []byte) (int, error) {
	q.mu.Lock()
	if len(q.buf)+len(p) > logQueueMax {
		q.lost++
	} else {
		q.buf = append(q.buf, p...)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (q *logQueue) loop() {
	for range q.wake {
		for {
			q.mu.Lock()
			b, lost := q.buf, q.lost
			q.buf, q.lost = nil, 0
			if len(b) == 0 && lost == 0 {
				q.busy = false
				close(q.idle)
				q.idle = make(chan struct{})
				q.mu.Unlock()
				break
			}
			q.busy = true
			q.mu.Unlock()
			_, _ = q.w.Write(b)
			if lost > 0 {
				_, _ = fmt.Fprintf(q.w, "fencedlock run: %d messages dropped: standard error was not read fast enough\n", lost)
			}
		}
	}
}

// Flush waits at most timeout until every queued byte was written, and
// reports whether it was.
func (q *logQueue) Flush(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		q.mu.Lock()
		empty := len(q.buf) == 0 && q.lost == 0 && !q.busy
		idle := q.idle
		q.mu.Unlock()
		if empty {
			return true
		}
		select {
		case q.wake <- struct{}{}:
		default:
		}
		select {
		case <-idle:
		case <-t.C:
			return false
		}
	}
}

// beforeAfter says "120ms before" for left > 0, "3ms after" otherwise.
func beforeAfter(left time.Duration) string {
	if left > 0 {
		return human.Duration(left).String() + " before"
	}
	return human.Duration(-left).String() + " after"
}

// aheadOrPast says "120ms ahead" for left > 0, "3ms past" otherwise.
func aheadOrPast(left time.Duration) string {
	if left > 0 {
		return human.Duration(left).String() + " ahead"
	}
	return human.Duration(-left).String() + " past"
}
