package redis

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestWatchOnClosedClient: a Watch on a closed rueidis client fails with
// an error wrapping ErrClosed, whichever comes first: the SUBSCRIBE's own
// error, or the subscription connection's monitor giving the dedicated
// connection back (rueidis then reports ErrDedicatedClientRecycled, which
// TestClosed once got under load). 100 rounds.
func TestWatchOnClosedClient(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	recycled := 0
	for i := range 100 {
		c, err := rueidis.NewClient(srv.ClientOption())
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		_, _, err = b.Watch(ctx, "k")
		b.Close()
		if err != nil && strings.Contains(err.Error(), "subscription connection lost") {
			recycled++
		}
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("round %d: watch on a closed client: %v, want ErrClosed", i, err)
		}
	}
	t.Logf("100 watches on closed clients: ErrClosed each time (%d after the connection was given back)", recycled)
}
