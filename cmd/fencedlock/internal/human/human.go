// Package human formats values for the messages of fencedlock and its
// demo, the way a reader wants them.
package human

import "time"

// Duration rounds d to what a human reads: milliseconds under a second,
// centiseconds under a minute, seconds beyond; 0 for d <= 0.
func Duration(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}
