package goredis

import (
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisedge"
	"github.com/redis/go-redis/v9"
)

// edgeDial is redisedge's Dial for this backend: a go-redis client with its
// default options.
func edgeDial(t testing.TB, addr, user, password string) driver.Backend {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password})
	b, err := New(c, Options{})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); c.Close() })
	return b
}

// TestEdgeACLDenials: every permission error a lock script meets is
// permanent (internal/redisedge.ACLDenials).
func TestEdgeACLDenials(t *testing.T) { redisedge.ACLDenials(t, edgeDial) }

// TestEdgeLostReply: a lock script whose reply is lost runs once and is not
// reported as not held (internal/redisedge.LostReply).
func TestEdgeLostReply(t *testing.T) { redisedge.LostReply(t, edgeDial) }

// TestEdgePausedRelease: Release and Close are bounded by ReleaseTimeout
// with the client's default options (internal/redisedge.PausedRelease).
func TestEdgePausedRelease(t *testing.T) { redisedge.PausedRelease(t, edgeDial) }
