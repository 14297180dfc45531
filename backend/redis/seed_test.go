package redis

import (
	"testing"

	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/internal/seedtest"
)

// TestSeed runs the four expectations of the original problem statement
// (one holder at a time, a lease kept past 5x its TTL, a late release that
// deletes nothing, a paused holder's write rejected) against a real
// redis-server; backend/goredis and backend/redis run the same tests.
func TestSeed(t *testing.T) {
	seedtest.Run(t, func(t *testing.T, srv *redistest.Server) seedtest.Backend {
		b, _ := newBackend(t, srv, Options{})
		return b
	})
}
