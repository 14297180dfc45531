//go:build unix

// Read-write locks (package rwlock, run --read/--write) in inspect and
// list, on a backend that describes them (driver.RWInspector). A
// read-write lock KEY is not the lock KEY: both may exist at once.

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// rwKind is the "kind" of a read-write lock's JSON object, which tells
// list's read-write locks from its locks.
const rwKind = "rwlock"

// rwLeaseOutput is one live lease of a read-write lock, in JSON.
type rwLeaseOutput struct {
	Holder string `json:"holder"`
	Fence  uint64 `json:"fence"`
	TTLms  int64  `json:"ttl_ms"`
}

// rwOutput is the --json form of a read-write lock: the "rwlock" member
// of inspect's object, one line of list.
type rwOutput struct {
	Key            string          `json:"key"`
	Kind           string          `json:"kind"`           // rwKind
	Held           bool            `json:"held"`           // a reader or the writer holds it
	Mode           string          `json:"mode,omitempty"` // "read" or "write", if held
	Writer         *rwLeaseOutput  `json:"writer,omitempty"`
	Readers        []rwLeaseOutput `json:"readers,omitempty"` // by fence
	WritersWaiting int             `json:"writers_waiting,omitempty"`
	Fence          uint64          `json:"fence"` // the last granted, read or write (0 on etcd)
}

// newRWOutput is the output of the read-write lock key as info describes it.
func newRWOutput(key string, info driver.RWInfo) rwOutput {
	lease := func(l driver.RWLease) rwLeaseOutput {
		return rwLeaseOutput{Holder: l.Holder, Fence: uint64(l.Fence), TTLms: l.TTL.Milliseconds()}
	}
	o := rwOutput{Key: key, Kind: rwKind, Held: info.Held(), WritersWaiting: info.Intents, Fence: uint64(info.Fence)}
	if info.Writer != nil {
		w := lease(*info.Writer)
		o.Writer, o.Mode = &w, driver.Write.String()
		o.Fence = max(o.Fence, w.Fence)
	}
	for _, r := range info.Readers {
		o.Readers = append(o.Readers, lease(r))
		o.Mode = driver.Read.String()
		o.Fence = max(o.Fence, uint64(r.Fence))
	}
	return o
}

// exists reports whether the read-write lock was ever used, as far as the
// backend remembers: held, waited for, or with a last fence.
func (o rwOutput) exists() bool { return o.Held || o.WritersWaiting > 0 || o.Fence != 0 }

// leases returns o's leases as mode/lease pairs, the writer first.
func (o rwOutput) leases() (modes []string, leases []rwLeaseOutput) {
	if o.Writer != nil {
		modes, leases = append(modes, driver.Write.String()), append(leases, *o.Writer)
	}
	for _, r := range o.Readers {
		modes, leases = append(modes, driver.Read.String()), append(leases, r)
	}
	return modes, leases
}

// waiting renders o's waiting writers ("2 writers"), "" if none.
func (o rwOutput) waiting() string {
	switch o.WritersWaiting {
	case 0:
		return ""
	case 1:
		return "1 writer"
	}
	return fmt.Sprintf("%d writers", o.WritersWaiting)
}

// lockKind is inspect's "kind" of KEY: which of the lock and the
// read-write lock of that name exist (they are distinct).
func lockKind(lock, rw bool) string {
	switch {
	case lock && rw:
		return "lock+rwlock"
	case rw:
		return rwKind
	case lock:
		return "lock"
	}
	return "none"
}

// kindText is lockKind as inspect's text says it.
func kindText(key string, lock, rw bool) string {
	switch {
	case lock && rw:
		return fmt.Sprintf("a lock and a read-write lock, both named %q (distinct: run KEY does not exclude run --read/--write KEY)", key)
	case rw:
		return "a read-write lock (run --read/--write); no lock of that name"
	case lock:
		return "a lock; no read-write lock of that name"
	}
	return "none taken yet (neither a lock nor a read-write lock)"
}

// printRWText prints the read-write lock o as inspect's text.
func printRWText(w io.Writer, o rwOutput) {
	fmt.Fprintf(w, "read-write lock %q:\n", o.Key)
	switch {
	case o.Writer != nil:
		fmt.Fprintf(w, "held:    write (1 writer)\n")
	case len(o.Readers) == 1:
		fmt.Fprintf(w, "held:    read (1 reader)\n")
	case o.Held:
		fmt.Fprintf(w, "held:    read (%d readers)\n", len(o.Readers))
	default:
		fmt.Fprintf(w, "held:    no\n")
	}
	if s := o.waiting(); s != "" {
		fmt.Fprintf(w, "waiting: %s (no new reader is granted meanwhile)\n", s)
	}
	if o.Fence == 0 {
		fmt.Fprintf(w, "fence:   none known (etcd keeps no last fence)\n")
	} else {
		fmt.Fprintf(w, "fence:   %d (last granted)\n", o.Fence)
	}
	modes, leases := o.leases()
	if len(leases) == 0 {
		return
	}
	fmt.Fprintf(w, "%-6s %-17s %-20s %s\n", "mode", "holder", "fence", "ttl")
	for i, l := range leases {
		fmt.Fprintf(w, "%-6s %-17s %-20d %v\n", modes[i], l.Holder, l.Fence, human.Duration(time.Duration(l.TTLms)*time.Millisecond))
	}
}

// listRWRows renders the read-write lock o as rows of list's table: one
// per lease, or one saying it is free.
func listRWRows(o rwOutput) []listRow {
	note := "read-write lock"
	if s := o.waiting(); s != "" {
		note += ", " + s + " waiting"
	}
	modes, leases := o.leases()
	if len(leases) == 0 {
		return []listRow{{held: "no", holder: "-", ttl: "-", fence: o.Fence, key: o.Key, note: note}}
	}
	rows := make([]listRow, len(leases))
	for i, l := range leases {
		rows[i] = listRow{held: modes[i], holder: l.Holder, ttl: human.Duration(time.Duration(l.TTLms) * time.Millisecond).String(), fence: l.Fence, key: o.Key, note: note}
	}
	return rows
}

// rwKeySuffixes are the suffixes (after the escaped name's "}") of the
// Redis keys that show a read-write lock was used; list finds the names
// by them.
var rwKeySuffixes = []string{redisnames.RWWriterSuffix, redisnames.RWReadersSuffix, redisnames.RWFenceSuffix, redisnames.RWIntentsSuffix}

// cutRWSuffix returns k without one of rwKeySuffixes, and whether it had one.
func cutRWSuffix(k string) (string, bool) {
	for _, s := range rwKeySuffixes {
		if rest, ok := strings.CutSuffix(k, s); ok {
			return rest, true
		}
	}
	return k, false
}
