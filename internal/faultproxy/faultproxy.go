// Package faultproxy is a small in-process TCP proxy for tests that inject
// network faults between a client and a server on loopback: a blackhole
// (bytes are held, nothing is delivered, connections stay open), added
// latency (both directions, or replies only), connection resets (existing
// connections are reset, and new ones can be reset as soon as they are
// accepted), and lost replies (the server's next replies are dropped and
// their connection reset, after the server has applied the request: the
// unknown outcome of a cut reply).
//
// Data read from one side and not yet delivered to the other (held by a
// blackhole or by latency) is dropped when either side closes: the proxy
// models a link whose in-flight bytes die with the peer, which is what a
// crashed server or a cut cable does to a lagging stream.
package faultproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its listening address to a target.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	latency   time.Duration
	replyLag  time.Duration // added to latency for bytes from the server
	cutReply  int           // server chunks still to drop, each resetting its link
	cut       int           // server chunks dropped so far
	blackhole bool
	healed    chan struct{} // closed when the blackhole ends; replaced when it starts
	refuse    bool          // reset every new connection at once
	conns     map[*link]struct{}
	accepted  int
}

type link struct {
	client, server *net.TCPConn
	once           sync.Once
	done           chan struct{}
}

// New starts a proxy on a free 127.0.0.1 port that forwards to target
// ("host:port"). Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*link]struct{}), healed: make(chan struct{})}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial: "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted returns how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// SetLatency delays every chunk of bytes, in each direction, by d from the
// moment the proxy read it. Zero removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetReplyLatency delays every chunk of bytes from the server to the client
// by d more than SetLatency's delay, so that requests reach the server on
// time and their replies arrive late. Zero removes it.
func (p *Proxy) SetReplyLatency(d time.Duration) {
	p.mu.Lock()
	p.replyLag = d
	p.mu.Unlock()
}

// CutReplies makes the proxy drop the next n chunks of bytes it reads from
// the server instead of delivering them, resetting the connection each came
// on: the server has applied the request, the client sees a reset and never
// its reply. A chunk is what one read returned, usually one reply (or
// several pipelined ones). Zero cancels what is left of an earlier call.
func (p *Proxy) CutReplies(n int) {
	p.mu.Lock()
	p.cutReply = n
	p.mu.Unlock()
}

// RepliesCut returns how many server chunks CutReplies has dropped so far.
func (p *Proxy) RepliesCut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Blackhole starts (on) or ends (off) a blackhole: while it lasts, bytes
// read from either side are held and nothing is delivered; connections
// stay open and new ones are accepted but carry nothing. When it ends, the
// held bytes are delivered in order (as TCP retransmission would).
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blackhole {
		return
	}
	p.blackhole = on
	if on {
		p.healed = make(chan struct{})
	} else {
		close(p.healed)
	}
}

// ResetAll resets every open connection on both sides (RST, not FIN) and
// drops the bytes in flight.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// RefuseNew makes the proxy reset every new connection as soon as it is
// accepted (on), or forward them again (off).
func (p *Proxy) RefuseNew(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Heal removes every fault: no latency, no blackhole, no replies left to
// cut, new connections forwarded. Existing connections are kept.
func (p *Proxy) Heal() {
	p.SetLatency(0)
	p.SetReplyLatency(0)
	p.CutReplies(0)
	p.Blackhole(false)
	p.RefuseNew(false)
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.blackhole {
		p.blackhole = false
		close(p.healed)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		p.accepted++
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		cc := c.(*net.TCPConn)
		if refuse || closed {
			reset(cc)
			continue
		}
		sc, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			reset(cc)
			continue
		}
		l := &link{client: cc, server: sc.(*net.TCPConn), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			continue
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(l, l.client, l.server, false)
		go p.pipe(l, l.server, l.client, true)
	}
}

func reset(c *net.TCPConn) {
	_ = c.SetLinger(0) // close sends RST
	_ = c.Close()
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		reset(l.client)
		reset(l.server)
	})
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies from src to dst through a queue: a reader goroutine stamps
// each chunk with its due time; this goroutine waits for the due time and
// for the blackhole to end, then writes it. Either side failing closes the
// link and drops what is queued. reply says src is the server.
func (p *Proxy) pipe(l *link, src, dst *net.TCPConn, reply bool) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	q := make(chan chunk, 1024)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				lag := p.latency
				drop := false
				if reply {
					lag += p.replyLag
					if p.cutReply > 0 {
						p.cutReply--
						p.cut++
						drop = true
					}
				}
				due := time.Now().Add(lag)
				p.mu.Unlock()
				if drop { // applied by the server, never delivered
					l.close()
					return
				}
				select {
				case q <- chunk{b: buf[:n], due: due}:
				case <-l.done:
					return
				}
			}
			if err != nil { // EOF, reset or closed: the link ends
				l.close()
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range q {
		for {
			p.mu.Lock()
			healed := p.healed
			p.mu.Unlock()
			select {
			case <-healed:
			case <-l.done:
				return
			}
			wait := time.Until(c.due)
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		select {
		case <-l.done:
			return
		default:
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
