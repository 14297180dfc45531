package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	return proxyTo(t, echo(t))
}

// proxyTo starts a Proxy to addr, closed when the test ends.
func proxyTo(t *testing.T, addr string) *Proxy {
	t.Helper()
	p, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return r.ReadString('\n')
}

func TestForwardAndLatency(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if got, err := roundTrip(t, c, r, "hello", 5*time.Second); err != nil || got != "hello\n" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	p.SetLatency(100 * time.Millisecond)
	t0 := time.Now()
	if got, err := roundTrip(t, c, r, "slow", 5*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	// Both directions are delayed: a round trip cannot be shorter.
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Fatalf("round trip with 100ms latency each way took %v", d)
	}
}

func TestBlackholeHoldsThenDelivers(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(t, c, r, "warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	if got, err := roundTrip(t, c, r, "held", 200*time.Millisecond); err == nil {
		t.Fatalf("got %q through a blackhole", got)
	}
	p.Blackhole(false)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
}

func TestResetAndRefuse(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(t, c, r, "warm", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read on a reset connection succeeded")
	}
	p.RefuseNew(true)
	// The proxy accepts and resets at once: the reset may reach the
	// client during its connect (the dial fails) or after (the round
	// trip fails). Either is a refusal; an answer is not.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Cleanup(func() { c2.Close() })
		if got, err := roundTrip(t, c2, bufio.NewReader(c2), "x", 5*time.Second); err == nil {
			t.Fatalf("refused connection answered %q", got)
		}
	} else {
		waitAccepted(t, p, 2)
	}
	p.Heal()
	c3, r3 := dial(t, p)
	if got, err := roundTrip(t, c3, r3, "back", 5*time.Second); err != nil || got != "back\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
	if n := p.Accepted(); n != 3 {
		t.Fatalf("accepted %d connections, want 3", n)
	}
}

// waitAccepted waits (bounded) until the proxy has accepted n connections.
func waitAccepted(t *testing.T, p *Proxy, n int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); p.Accepted() < n; {
		if time.Now().After(end) {
			t.Fatalf("proxy accepted %d connections, want %d", p.Accepted(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReplyLatencyDelaysRepliesOnly(t *testing.T) {
	srv, got := recorder(t)
	p := proxyTo(t, srv)
	c, r := dial(t, p)
	p.SetReplyLatency(300 * time.Millisecond)
	t0 := time.Now()
	// The request reaches the server without the reply's delay...
	sent(t, c, got, "req")
	arrived := time.Since(t0)
	// ...and the reply is held for it.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "req\n" {
		t.Fatalf("reply = %q, %v", line, err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond || arrived >= d {
		t.Fatalf("request arrived after %v, reply after %v; want the reply delayed by 300ms, the request not", arrived, d)
	}
}

func TestCutRepliesAppliesThenResets(t *testing.T) {
	srv, got := recorder(t)
	p := proxyTo(t, srv)
	c, r := dial(t, p)
	p.CutReplies(1)
	sent(t, c, got, "applied")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("the cut reply arrived: %q", line)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was not reset: %v", err)
	}
	if n := p.RepliesCut(); n != 1 {
		t.Fatalf("RepliesCut = %d, want 1", n)
	}
	// Only one: the next connection gets its replies.
	c2, r2 := dial(t, p)
	if line, err := roundTrip(t, c2, r2, "next", 5*time.Second); err != nil || line != "next\n" {
		t.Fatalf("after the cut: %q, %v", line, err)
	}
	<-got
}

// sent writes the line msg on c and waits until the recorder's server got
// it.
func sent(t *testing.T, c net.Conn, got <-chan string, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-got:
		if line != msg+"\n" {
			t.Fatalf("server got %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request did not reach the server")
	}
}

// recorder starts an echo server that also sends every line it reads to
// the returned channel (buffered), so a test sees when a request arrived.
func recorder(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}
