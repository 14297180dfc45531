//go:build unix

// inspect --leader NAME: the current term of an election (package
// election) on a backend that holds elections (driver.Elector).

package main

import (
	"context"
	"fmt"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
)

// leaderOutput is the --json form of inspect --leader. Value is the
// leader's value as text (invalid UTF-8 is replaced, as JSON requires).
type leaderOutput struct {
	Election string `json:"election"`
	Held     bool   `json:"held"`
	Value    string `json:"value,omitempty"`
	Fence    uint64 `json:"fence,omitempty"`
	Holder   string `json:"holder,omitempty"`
	TTLms    int64  `json:"ttl_ms,omitempty"`
}

// inspectLeader prints the current term of the election name on b and
// returns inspect's exit code: 0 if a leader is in office, 1 if none, 69
// if the backend holds no elections or cannot be read.
func (e *env) inspectLeader(ctx context.Context, b driver.Backend, cfg backendConfig, name string, jsonOut bool) int {
	el, ok := b.(driver.Elector)
	if !ok {
		fmt.Fprintf(e.stderr, "fencedlock inspect: the %s backend holds no elections (--leader needs a backend that implements driver.Elector: Redis, etcd, memory)\n", cfg.describe())
		return exitBackend
	}
	ictx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	info, err := el.Leader(ictx, name)
	if err != nil {
		return e.readFailed(cfg, err)
	}
	out := leaderOutput{Election: name, Held: info.Held}
	if info.Held {
		out.Value, out.Fence, out.Holder, out.TTLms = string(info.Value), uint64(info.Fence), info.Holder, info.TTL.Milliseconds()
	}
	if jsonOut {
		return e.printJSON("inspect", out, heldCode(info.Held))
	}
	fmt.Fprintf(e.stdout, "election: %q\n", name)
	if !info.Held {
		fmt.Fprintf(e.stdout, "leader:   none\n")
		return heldCode(false)
	}
	fmt.Fprintf(e.stdout, "leader:   yes\nvalue:    %q\nfence:    %v (the term's)\nholder:   %s\nttl:      %v\n",
		info.Value, info.Fence, info.Holder, human.Duration(info.TTL))
	return heldCode(true)
}
