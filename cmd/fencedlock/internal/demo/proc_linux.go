//go:build linux

package demo

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// procState returns the scheduler state letter of pid from /proc once it
// reads "T" (stopped), or the last state read when timeout passes. ok is
// false if the state cannot be read.
func procState(pid int, timeout time.Duration) (state string, ok bool) {
	deadline := time.Now().Add(timeout)
	for i := 0; i < 1000; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return "", false
		}
		// pid (comm) S ...: comm may contain spaces and parentheses.
		s := string(b)
		j := strings.LastIndexByte(s, ')')
		if j < 0 || j+3 > len(s) {
			return "", false
		}
		state = s[j+2 : j+3]
		if state == "T" || !time.Now().Before(deadline) {
			return state, true
		}
		time.Sleep(time.Millisecond)
	}
	return state, true
}
