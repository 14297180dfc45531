package testserver

import (
	"context"
	"strings"
	"testing"
)

func TestStartClientRestart(t *testing.T) {
	s := StartRedis(t, WithConfig("appendonly yes", "appendfsync always"))
	c := s.Client(t, nil)
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	v, err := c.Do(ctx, c.B().Get().Key("k").Build()).ToString()
	if err != nil || v != "v" {
		t.Fatalf("after restart with appendonly: GET k = %q, %v; want v", v, err)
	}
	out, err := s.CLI(t, "GET", "k")
	if err != nil || strings.TrimSpace(out) != "v" {
		t.Fatalf("redis-cli GET k = %q, %v", out, err)
	}
	s.Kill()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
}

func TestPasswordAndReplica(t *testing.T) {
	p := StartRedis(t, WithUser("app", "s3cret"))
	r := StartRedis(t, WithReplicaOf(p))
	pc := p.Client(t, nil)
	ctx := context.Background()
	if err := pc.Do(ctx, pc.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	n, err := pc.Do(ctx, pc.B().Wait().Numreplicas(1).Timeout(10000).Build()).AsInt64()
	if err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1 (replica log:\n%s)", n, err, r.Log())
	}
	out, err := r.CLI(t, "GET", "k")
	if err != nil || strings.TrimSpace(out) != "v" {
		t.Fatalf("replica GET k = %q, %v", out, err)
	}
	// Without credentials the primary refuses.
	out, _ = (&Redis{Port: p.Port}).CLI(t, "GET", "k")
	if !strings.Contains(out, "NOAUTH") {
		t.Fatalf("unauthenticated GET: %q, want NOAUTH", out)
	}
}
