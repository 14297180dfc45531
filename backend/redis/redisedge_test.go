package redis

import (
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisedge"
	"github.com/redis/rueidis"
)

// edgeDial is redisedge's Dial for this backend: a rueidis client with its
// default options (no client-side cache).
func edgeDial(t testing.TB, addr, user, password string) driver.Backend {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: password, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
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
