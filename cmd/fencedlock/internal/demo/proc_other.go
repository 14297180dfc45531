//go:build unix && !linux

package demo

import "time"

// procState is not available without /proc.
func procState(pid int, timeout time.Duration) (string, bool) { return "", false }
