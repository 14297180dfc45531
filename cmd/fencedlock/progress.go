//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
)

// progressAfter is how long a waiting run waits before its (n+1)th report
// of who holds the lock (the first is made at once): 2 s, then 10 s, then
// every minute, so that a short wait is followed closely and a long one
// does not flood a log.
func progressAfter(n int) time.Duration {
	switch n {
	case 0:
		return 2 * time.Second
	case 1:
		return 10 * time.Second
	}
	return time.Minute
}

// inspectTimeout bounds one Inspect made for a progress or error message.
const inspectTimeout = 2 * time.Second

// openTimeout bounds how long opening a backend may take.
const openTimeout = 5 * time.Second

// progress prints progress messages on standard error unless quiet.
type progress struct {
	e     *env
	quiet bool
	key   string
	// log, if set (--log-format json), receives the messages as slog
	// records with attributes instead of text lines.
	log *slog.Logger
	// limit above 1: run waits for one of limit permits of the semaphore key.
	limit int
}

func (p *progress) printf(format string, args ...any) {
	if p.quiet {
		return
	}
	if p.log != nil {
		p.log.Info(fmt.Sprintf(format, args...), "key", p.key)
		return
	}
	fmt.Fprintf(p.e.stderr, "fencedlock: "+format+"\n", args...)
}

// acquired reports the lease taken.
func (p *progress) acquired(l *fencedlock.Lease) {
	if p.quiet {
		return
	}
	if p.log != nil {
		p.log.Info("acquired", "key", p.key, "lock", l.Key(), "fence", uint64(l.Fence()), "holder", l.Holder(), "ttl_ms", l.TTL().Milliseconds())
		return
	}
	p.printf("acquired %q: fence %v, holder %s, lease %v", l.Key(), l.Fence(), l.Holder(), human.Duration(l.TTL()))
}

// waiting reports who holds the key and for how long.
func (p *progress) waiting(ctx context.Context, b driver.Backend, since time.Time) {
	if p.quiet {
		return
	}
	waited := time.Since(since)
	if p.limit > 1 {
		p.printf("waiting for one of %d permits of %q: all held%s; waited %v", p.limit, p.key, describePermits(ctx, b, p.key, p.limit), human.Duration(waited))
		return
	}
	if p.log != nil {
		attrs := []any{"key", p.key, "waited_ms", waited.Milliseconds()}
		if in, ok := b.(driver.Inspector); ok {
			ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
			info, err := in.Inspect(ictx, p.key)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				attrs = append(attrs, "inspect_error", errText(err))
			default:
				attrs = append(attrs, "held", info.Held)
				if info.Held {
					attrs = append(attrs, "holder", info.Holder, "fence", uint64(info.Fence), "ttl_ms", info.TTL.Milliseconds())
				}
			}
		}
		p.log.Info("waiting", attrs...)
		return
	}
	p.printf("waiting for %q: held%s; waited %v", p.key, describeHolder(ctx, b, p.key), human.Duration(waited))
}

// busy says, for run --try, that the key (or every permit) is held, and
// by whom.
func (p *progress) busy(ctx context.Context, b driver.Backend) string {
	if p.limit > 1 {
		return fmt.Sprintf("all %d permits of %q are held%s", p.limit, p.key, describePermits(ctx, b, p.key, p.limit))
	}
	return fmt.Sprintf("%q is held%s", p.key, describeHolder(ctx, b, p.key))
}

// describeHolder returns ": held by holder H (fence F), lease ends in T" for
// messages, or "" if the backend cannot tell.
func describeHolder(ctx context.Context, b driver.Backend, key string) string {
	in, ok := b.(driver.Inspector)
	if !ok {
		return ""
	}
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	info, err := in.Inspect(ictx, key)
	if err != nil {
		if ctx.Err() != nil {
			return "" // the wait ended meanwhile: nothing to report
		}
		return fmt.Sprintf(" (cannot tell by whom: %v)", err)
	}
	if !info.Held {
		return " (free right now; retrying)"
	}
	s := " by holder " + info.Holder
	if info.Holder == "" {
		s = " by another owner"
	}
	if info.Fence != 0 {
		s += fmt.Sprintf(" (fence %v)", info.Fence)
	}
	if info.TTL > 0 {
		s += fmt.Sprintf(", lease ends in %v unless renewed", human.Duration(info.TTL))
	}
	return s
}
