//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"syscall"
)

// procInfo names one process: its pid and its start time (clock ticks
// after boot), which together tell it from a later process given the
// same pid.
type procInfo struct {
	pid   int
	start uint64
}

// procHandle signals one process: through a pidfd on Linux, so that a
// signal can only reach the process that was found, never a later one
// given the same pid (see openProc).
type procHandle struct {
	info procInfo
	fd   int // pidfd, or -1: by pid
}

// errProcGone says a process has ended (or its pid now names another).
var errProcGone = errors.New("fencedlock: process gone")

// treeKiller signals the processes descending from root (the supervisor,
// or run once the supervisor died: both are child subreapers on Linux, so
// every orphan of the tree stays under them). It keeps a handle on each
// process it signalled, and signals that process again through it, never
// by a pid number that may have been reused since. A signal refused with
// EPERM (a descendant running as another user, through sudo, su or
// setpriv) is reported (once per user id: a shell loop of another user
// starts a new process every turn), and such a process counts as alive:
// the tree is not proven gone while it runs.
type treeKiller struct {
	root   int
	name   string    // COMMAND, for messages
	stderr io.Writer // never blocks (a logQueue)
	procs  map[procInfo]*procHandle
	told   map[int]bool // user ids whose refusal was reported
}

func newTreeKiller(root int, name string, stderr io.Writer) *treeKiller {
	return &treeKiller{root: root, name: name, stderr: stderr, procs: map[procInfo]*procHandle{}, told: map[int]bool{}}
}

// signal sends sig to every live process of the tree, found by a fresh
// look at /proc, through the handle taken when it was first found. It
// returns how many processes it found alive (a signal just sent may not
// have acted yet) and how many of them refused it.
func (k *treeKiller) signal(sig syscall.Signal) (alive, denied int) {
	live := map[procInfo]bool{}
	for _, p := range listTree(k.root) {
		live[p] = true
		if _, ok := k.procs[p]; ok {
			continue
		}
		h, err := openProc(p)
		if err != nil {
			continue // gone already
		}
		k.procs[p] = &h
	}
	for p, h := range k.procs {
		if !live[p] {
			h.close() // ended (a zombie cannot run)
			delete(k.procs, p)
			continue
		}
		err := h.signal(sig)
		switch {
		case err == nil:
			alive++
		case errors.Is(err, errProcGone):
			h.close()
			delete(k.procs, p)
		default:
			alive++
			denied++
			if u := procUID(p.pid); !k.told[u] {
				k.told[u] = true
				uid := "uid unknown"
				if u >= 0 {
					uid = "uid " + strconv.Itoa(u)
				}
				fmt.Fprintf(k.stderr, "fencedlock run: cannot send %s to process %d (%s) of %q's tree: %v; the tree is not gone while it runs, so the lock is kept (refusals by other processes of %s are not reported again)\n",
					sigName(sig), p.pid, uid, k.name, err, uid)
			}
		}
	}
	return alive, denied
}

// close closes every handle.
func (k *treeKiller) close() {
	for p, h := range k.procs {
		h.close()
		delete(k.procs, p)
	}
}

// sigName is "SIGKILL" for syscall.SIGKILL, and so on for the signals the
// kill switch sends.
func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return sig.String()
}
