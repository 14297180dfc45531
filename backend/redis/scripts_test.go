package redis

import (
	"context"
	"errors"
	"net"
	"testing"
)

// dialTimeout is the error of a dial whose deadline passed while it was
// under way, as net returns it ("i/o timeout"): a net.Error that times out
// and is not context.DeadlineExceeded.
type dialTimeout struct{}

func (dialTimeout) Error() string   { return "i/o timeout" }
func (dialTimeout) Timeout() bool   { return true }
func (dialTimeout) Temporary() bool { return true }

// TestForeignCancelDialTimeout: a dial cut short by another caller's
// deadline is another caller's error while the command's own ctx is live,
// and not once that ctx has ended; a timeout of anything but a dial (a
// reply that may have been lost after the server ran the script) and an
// error of the server are never one.
func TestForeignCancelDialTimeout(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: dialTimeout{}}
	if errors.Is(dial, context.DeadlineExceeded) {
		t.Fatal("the dial timeout is context.DeadlineExceeded: the test checks nothing new")
	}
	if !foreignCancel(context.Background(), dial) {
		t.Errorf("foreignCancel(live ctx, %v) = false; want true", dial)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if foreignCancel(ended, dial) {
		t.Errorf("foreignCancel(ended ctx, %v) = true; want false", dial)
	}
	read := &net.OpError{Op: "read", Net: "tcp", Err: dialTimeout{}}
	if foreignCancel(context.Background(), read) {
		t.Errorf("foreignCancel(live ctx, %v) = true; want false (the script may have run)", read)
	}
	if foreignCancel(context.Background(), errors.New("ERR something")) {
		t.Error("foreignCancel of a server error = true")
	}
}
