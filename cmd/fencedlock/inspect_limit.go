//go:build unix

// inspect --limit N: the permits of a semaphore, one slot lock each.

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/semaphore"
)

// permitOutput is the --json form of one slot of inspect --limit: the
// slot lock's state as inspect prints a lock's, with the semaphore's name
// and the slot.
type permitOutput struct {
	Semaphore string `json:"semaphore"`
	Slot      int    `json:"slot"`
	inspectOutput
}

// inspectPermits prints the state of each of the limit slots of the
// semaphore name and returns inspect's exit code: 0 if every permit is
// held (a run --try --limit would get none), 1 if one is free.
func (e *env) inspectPermits(ctx context.Context, in driver.Inspector, cfg backendConfig, name string, limit int, jsonOut bool) int {
	infos, err := inspectSlots(ctx, in, name, limit)
	if err != nil {
		return e.readFailed(cfg, err)
	}
	held := 0
	if !jsonOut {
		fmt.Fprintf(e.stdout, "semaphore %q, limit %d\n%-5s %-8s %-17s %-20s %s\n", name, limit, "slot", "held", "holder", "fence", "ttl")
	}
	for i, info := range infos {
		out := permitOutput{Semaphore: name, Slot: i, inspectOutput: lockOutput(semaphore.SlotKey(name, i), info)}
		if info.Held {
			held++
		}
		if jsonOut {
			if e.printJSON("inspect", out, exitOK) != exitOK {
				return exitFailure
			}
			continue
		}
		fmt.Fprintln(e.stdout, slotLine(i, info))
	}
	if !jsonOut {
		prefix := strings.TrimSuffix(semaphore.SlotKey(name, 0), "0")
		fmt.Fprintf(e.stdout, "%d of %d permits held; slot i is the lock %q+i (fencedlock list %q lists them)\n", held, limit, prefix, prefix)
	}
	return heldCode(held == limit)
}

// slotLine renders one slot of inspect --limit as a text line.
func slotLine(slot int, info driver.Info) string {
	fence := "-"
	if info.Fence != 0 {
		fence = info.Fence.String()
		if !info.Held {
			fence += " (last)"
		}
	}
	if !info.Held {
		return fmt.Sprintf("%-5d %-8s %-17s %-20s %s", slot, "no", "-", fence, "-")
	}
	holder := info.Holder
	if holder == "" {
		holder = "(another owner)"
	}
	return fmt.Sprintf("%-5d %-8s %-17s %-20s %v", slot, "yes", holder, fence, human.Duration(info.TTL))
}
