package conformance

import (
	"net"
	"os"
	"sync"
	"time"
)

// DelayReads returns c with every byte read from it delivered delay after
// it arrived, as if the network between the store and the client were that
// slow on the way back; writes are not delayed. A harness whose client
// takes a dial function can implement [Delayer] with it (rueidis's
// ClientOption.DialCtxFn, a database/sql connector, a gRPC dialer). Read
// deadlines are honoured; a Read is expected from one goroutine at a time,
// as a client's reader does.
func DelayReads(c net.Conn, delay time.Duration) net.Conn {
	d := &delayedConn{Conn: c, delay: delay, chunks: make(chan chunk, 256), closed: make(chan struct{})}
	go d.pump()
	return d
}

type chunk struct {
	b   []byte
	at  time.Time // when it arrived
	err error
}

type delayedConn struct {
	net.Conn
	delay  time.Duration
	chunks chan chunk
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	deadline time.Time // for reads
	pending  *chunk    // taken from chunks, not yet fully read
}

func (d *delayedConn) pump() {
	for {
		buf := make([]byte, 32<<10)
		n, err := d.Conn.Read(buf)
		var c chunk
		if n > 0 {
			c = chunk{b: buf[:n], at: time.Now()}
		}
		if err != nil {
			if n > 0 && !d.offer(c) {
				return
			}
			d.offer(chunk{at: time.Now(), err: err})
			return
		}
		if !d.offer(c) {
			return
		}
	}
}

func (d *delayedConn) offer(c chunk) bool {
	select {
	case d.chunks <- c:
		return true
	case <-d.closed:
		return false
	}
}

func (d *delayedConn) Read(p []byte) (int, error) {
	d.mu.Lock()
	pending, deadline := d.pending, d.deadline
	d.mu.Unlock()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		timeout = timer.C
	}
	if pending == nil {
		select {
		case c := <-d.chunks:
			pending = &c
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-d.closed:
			return 0, net.ErrClosed
		}
		d.mu.Lock()
		d.pending = pending
		d.mu.Unlock()
	}
	if wait := time.Until(pending.at.Add(d.delay)); wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-d.closed:
			return 0, net.ErrClosed
		}
	}
	if pending.err != nil {
		return 0, pending.err
	}
	n := copy(p, pending.b)
	pending.b = pending.b[n:]
	if len(pending.b) == 0 {
		d.mu.Lock()
		d.pending = nil
		d.mu.Unlock()
	}
	return n, nil
}

func (d *delayedConn) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	d.deadline = t
	d.mu.Unlock()
	return nil
}

func (d *delayedConn) SetDeadline(t time.Time) error {
	_ = d.SetReadDeadline(t)
	return d.Conn.SetWriteDeadline(t)
}

func (d *delayedConn) Close() error {
	d.once.Do(func() { close(d.closed) })
	return d.Conn.Close()
}
