//go:build unix

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock"
)

// progressInterval is how often a waiting run reports who holds the lock.
const progressInterval = 2 * time.Second

// inspectTimeout bounds one Inspect made for a progress or error message.
const inspectTimeout = 2 * time.Second

// openTimeout bounds how long opening a backend may take.
const openTimeout = 5 * time.Second

// progress prints progress messages on standard error unless quiet.
type progress struct {
	e     *env
	quiet bool
	key   string
}

func (p *progress) printf(format string, args ...any) {
	if p.quiet {
		return
	}
	fmt.Fprintf(p.e.stderr, "fencedlock: "+format+"\n", args...)
}

// waiting reports who holds the key and for how long.
func (p *progress) waiting(ctx context.Context, b fencedlock.Backend, since time.Time) {
	if p.quiet {
		return
	}
	p.printf("waiting for %q: held%s; waited %v", p.key, describeHolder(ctx, b, p.key), roundDuration(time.Since(since)))
}

// describeHolder returns ": held by holder H (fence F), lease ends in T" for
// messages, or "" if the backend cannot tell.
func describeHolder(ctx context.Context, b fencedlock.Backend, key string) string {
	in, ok := b.(fencedlock.Inspector)
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
		s += fmt.Sprintf(", lease ends in %v unless renewed", roundDuration(info.TTL))
	}
	return s
}
