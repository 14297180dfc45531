//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
)

// The demo's fenced resource: one value, kept in the demo's parent process
// behind a fencing.Guard, so the check of the fence and the write are one
// atomic step. Workers submit writes over loopback TCP, one line each:
//
//	WRITE <fence> <holder id> <quoted value>\n
//
// and get back "ACCEPTED\n" or "REJECTED <reason>\n". Keeping the resource
// outside the lock server shows the point of fencing: the resource, not the
// lock, decides, with nothing but the token in the request.
//
// An unfenced resource (demo --no-fencing) applies every write, as a store
// that ignores the token would: it shows what the fence prevents.
type resource struct {
	ln       net.Listener
	onEvt    func(resourceEvent)
	unfenced bool
	guard    fencing.Guard
	mu       sync.Mutex
	value    string
	writes   int
	last     fencing.Token // unfenced: the token of the last write
	lastFrom string
	wg       sync.WaitGroup
}

// resourceEvent describes one write the resource decided on.
type resourceEvent struct {
	Fence    fencing.Token
	Holder   string
	Value    string
	Accepted bool
	Err      error
}

func startResource(unfenced bool, onEvt func(resourceEvent)) (*resource, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the fenced resource: %w", err)
	}
	r := &resource{ln: ln, onEvt: onEvt, unfenced: unfenced}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *resource) addr() string { return r.ln.Addr().String() }

func (r *resource) close() {
	_ = r.ln.Close()
	r.wg.Wait()
}

// state returns the current value, the fence and holder of the write that
// set it, and the number of accepted writes.
func (r *resource) state() (string, fencing.Token, string, int) {
	tok, holder := r.guard.Accepted()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unfenced {
		tok, holder = r.last, r.lastFrom
	}
	return r.value, tok, holder, r.writes
}

func (r *resource) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				fmt.Fprintln(c, r.handle(sc.Text()))
			}
		}()
	}
}

func (r *resource) handle(line string) string {
	fence, holder, value, err := parseWrite(line)
	if err != nil {
		return "ERROR " + err.Error()
	}
	apply := func() error {
		r.mu.Lock()
		r.value = value
		r.writes++
		r.last, r.lastFrom = fence, holder
		r.mu.Unlock()
		return nil
	}
	if r.unfenced {
		err = apply()
	} else {
		err = r.guard.Do(fence, holder, apply)
	}
	if r.onEvt != nil {
		r.onEvt(resourceEvent{Fence: fence, Holder: holder, Value: value, Accepted: err == nil, Err: err})
	}
	if err != nil {
		return "REJECTED " + err.Error()
	}
	return "ACCEPTED"
}

func parseWrite(line string) (fencing.Token, string, string, error) {
	parts := strings.SplitN(line, " ", 4)
	if len(parts) != 4 || parts[0] != "WRITE" {
		return 0, "", "", errors.New("want: WRITE <fence> <holder> <quoted value>")
	}
	fence, err := fencing.ParseToken(parts[1])
	if err != nil {
		return 0, "", "", err
	}
	value, err := strconv.Unquote(parts[3])
	if err != nil {
		return 0, "", "", fmt.Errorf("value: %w", err)
	}
	return fence, parts[2], value, nil
}

// writeResource submits one write to the resource at addr. It returns nil
// if the resource accepted it, and an error wrapping fencing.ErrStale if it
// rejected it as stale.
func writeResource(ctx context.Context, addr string, fence fencing.Token, holder, value string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(c, "WRITE %v %s %s\n", fence, holder, strconv.Quote(value)); err != nil {
		return err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the resource's reply: %w", err)
	}
	reply = strings.TrimSpace(reply)
	switch {
	case reply == "ACCEPTED":
		return nil
	case strings.HasPrefix(reply, "REJECTED "):
		return staleReply(strings.TrimPrefix(reply, "REJECTED "))
	}
	return fmt.Errorf("resource said: %s", reply)
}

// staleReply is the resource's rejection of a stale write, as it said it.
type staleReply string

func (s staleReply) Error() string { return string(s) }

// Unwrap returns fencing.ErrStale.
func (s staleReply) Unwrap() error { return fencing.ErrStale }
