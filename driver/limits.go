package driver

import (
	"time"
)

const (
	// MaxKeyLen is the longest key, in bytes, a Locker accepts.
	MaxKeyLen = 1024

	// MinTTL is the shortest lease a Locker accepts. Shorter leases leave
	// no room for a renewal round trip and the safety margin.
	MinTTL = 50 * time.Millisecond

	// MaxTTL is the longest lease a Locker accepts. A crashed holder keeps a
	// key for up to its TTL, so longer leases are almost always mistakes.
	MaxTTL = 24 * time.Hour

	// DefaultReleaseTimeout bounds a Release, which runs detached from the
	// caller's cancellation.
	DefaultReleaseTimeout = 5 * time.Second
)

// ValidateKey reports whether key is acceptable as a lock name: 1 to
// [MaxKeyLen] bytes. Any bytes are allowed, including slashes, braces,
// spaces and invalid UTF-8.
func ValidateKey(key string) error {
	if key == "" {
		return invalidf("empty key")
	}
	if len(key) > MaxKeyLen {
		return invalidf("key of %d bytes exceeds MaxKeyLen %d", len(key), MaxKeyLen)
	}
	return nil
}
