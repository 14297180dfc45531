package conformance_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/conformance"
)

// TestDelayReads checks that DelayReads delivers bytes no earlier than its
// delay after they arrived, in order, and honours read deadlines.
func TestDelayReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			srv <- c
		}
		close(srv)
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const delay = 50 * time.Millisecond
	c := conformance.DelayReads(raw, delay)
	defer c.Close()
	s := <-srv
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()

	sent := time.Now()
	if _, err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(sent); got < delay {
		t.Fatalf("read %q %v after it was written, want at least %v", buf, got, delay)
	}
	if string(buf) != "hello" {
		t.Fatalf("read %q", buf)
	}

	// A deadline that passes while a chunk waits for its delay.
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(delay / 5))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("Read after the deadline was lifted: %q, %v", buf[:n], err)
	}

	// The peer's close arrives as EOF, delayed too.
	s.Close()
	if _, err := c.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the peer closed: %v, want EOF", err)
	}
}
