package redis

//go:generate go run ../../internal/luagen -dir ../../internal/redisscript

import (
	"context"
	"errors"
	"net"
)

// foreignRetries is how many times a script is run again after it failed
// with another caller's context error (see foreignCancel).
const foreignRetries = 3

// foreignCancel reports whether err is a context's error while ctx itself
// is live: the error of another caller's context.
//
// rueidis opens a connection lazily (at its first use, and again after
// one closed), and says HELLO on it, with the context of the command that
// needs it first; every command waiting for that connection gets the same
// error. A command whose own ctx is live can so fail with
// context.Canceled or context.DeadlineExceeded because another caller
// gave up, with nothing of it sent: a Lease's Release (or the Locker's
// clean-up after an acquire of unknown outcome) would leave its lock held
// for the whole TTL, and a renewal would be counted as failed. conn runs
// such a script again (one marked Again: it may run twice with the same
// effect), at most foreignRetries times; an error of ctx itself is
// returned as it is. A dial that another caller's deadline cut short
// while it was under way fails with a net timeout ("dial tcp ...: i/o
// timeout") that is not context.DeadlineExceeded: it counts too (nothing
// was sent on a connection that never opened). Seen as a semaphore
// clean-up that left its slot held (TestRedisCancelledPermitsLeaveNoOrphan).
func foreignCancel(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var op *net.OpError
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &op) && op.Op == "dial" && op.Timeout())
}
