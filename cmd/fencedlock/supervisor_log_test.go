//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestLogQueueNeverBlocks: with its writer a pipe nobody reads, 1000
// messages of 1 KiB (far more than the pipe and the queue hold) are all
// accepted at once; the ones that did not fit are dropped and counted, and
// once the pipe is read every message is either written whole or counted.
func TestLogQueueNeverBlocks(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	q := newLogQueue(w)
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	const n = 1000
	done := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			_, _ = q.Write(line)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write blocked on a pipe nobody reads")
	}
	out := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	if !q.Flush(30 * time.Second) {
		t.Fatal("the queue did not drain once the pipe was read")
	}
	w.Close()
	b := <-out
	written := bytes.Count(b, line)
	// The count is reported each time the queue drains after a drop: on a
	// loaded machine the writer can drain it more than once while the
	// messages come, so every report counts.
	reports := regexp.MustCompile(`(\d+) messages dropped`).FindAllSubmatch(b, -1)
	if reports == nil {
		t.Fatalf("%d messages written, none reported dropped", written)
	}
	dropped := 0
	for _, m := range reports {
		d, _ := strconv.Atoi(string(m[1]))
		dropped += d
	}
	if written+dropped != n || dropped == 0 {
		t.Errorf("%d messages written and %d reported dropped, want %d in all", written, dropped, n)
	}
	t.Logf("%d messages written, %d dropped and counted in %d reports", written, dropped, len(reports))
}
