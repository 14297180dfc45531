//go:build unix

package demo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/testserver"
)

// redisServer is the demo's Server on s, with the backend's key prefix
// (the default if empty).
func redisServer(t *testing.T, s *testserver.Redis, prefix string) Server {
	t.Helper()
	return Server{
		Name: "redis " + s.Addr,
		DialRedis: func() (rueidis.Client, *redisb.Backend, error) {
			opt := s.ClientOption()
			opt.DisableCache = true
			c, err := rueidis.NewClient(opt)
			if err != nil {
				return nil, nil, err
			}
			b, err := redisb.New(c, redisb.Options{KeyPrefix: prefix})
			if err != nil {
				c.Close()
				return nil, nil, err
			}
			return c, b, nil
		},
	}
}

// TestDemoResourceRedis drives the demo's resource on a real redis-server
// through open, as the workers and the demo do: the server applies the
// fencing rule to FencedSet, a plain write (--no-fencing) ignores it, reset
// clears value and fence record, and a key inside the prefix is refused.
func TestDemoResourceRedis(t *testing.T) {
	s := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := redisServer(t, s, "")
	const key = "demo:test:resource"
	_, res, closeAll, err := open(ctx, cfg, key, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if err := res.reset(ctx); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		fence  fencing.Token
		holder string
		value  string
		ok     bool
	}{
		{5, "aaaa", "first", true},
		{7, "bbbb", "second with spaces \"quoted\"", true},
		{7, "bbbb", "same holder again", true},
		{7, "cccc", "same fence, other holder", false},
		{5, "aaaa", "late", false},
		{8, "dddd", "newest", true},
	}
	for _, s := range steps {
		err := res.write(ctx, s.value, s.fence, s.holder)
		if s.ok && err != nil || !s.ok && !errors.Is(err, fencing.ErrStale) {
			t.Errorf("write fence %d by %s: %v (want ok=%v)", s.fence, s.holder, err, s.ok)
		}
		var stale *fencing.StaleError
		if !s.ok && errors.As(err, &stale) && (stale.Accepted != 7 || stale.AcceptedFrom != "bbbb") {
			t.Errorf("stale error names %d from %s, want 7 from bbbb", stale.Accepted, stale.AcceptedFrom)
		}
	}
	st, err := res.read(ctx)
	if err != nil || !st.ok || st.value != "newest" || st.fence != 8 || st.holder != "dddd" {
		t.Errorf("read = %+v, %v; want newest, fence 8 from dddd", st, err)
	}

	// --no-fencing: the same server applies a write with an old fence.
	_, plain, closePlain, err := open(ctx, cfg, key, true)
	if err != nil {
		t.Fatal(err)
	}
	defer closePlain()
	if err := plain.write(ctx, "late and unfenced", 1, "aaaa"); err != nil {
		t.Fatalf("plain write: %v", err)
	}
	if st, err := res.read(ctx); err != nil || st.value != "late and unfenced" || st.fence != 8 {
		t.Errorf("after the plain write: %+v, %v; want its value, fence record untouched", st, err)
	}

	// reset deletes value and fence record: fence 1 is accepted again.
	if err := res.reset(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := res.read(ctx); err != nil || st.ok || st.fence != 0 || st.holder != "" {
		t.Errorf("after reset: %+v, %v; want nothing", st, err)
	}
	if err := res.write(ctx, "again", 1, "aaaa"); err != nil {
		t.Errorf("fence 1 after reset: %v", err)
	}

	for _, bad := range []string{"", "fencedlock:mine"} {
		if _, _, c, err := open(ctx, cfg, bad, false); !errors.Is(err, driver.ErrInvalid) {
			if c != nil {
				c()
			}
			t.Errorf("open(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, _, c, err := open(ctx, redisServer(t, s, "demo:"), key, false); !errors.Is(err, driver.ErrInvalid) {
		if c != nil {
			c()
		}
		t.Errorf("resource inside --key-prefix demo: = %v, want ErrInvalid", err)
	}
}
