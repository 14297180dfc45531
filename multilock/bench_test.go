package multilock_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/testserver"
	"github.com/fencedlock/fencedlock/multilock"
)

// counts returns the number of scripts (EVALSHA and EVAL calls: one
// round trip each) and of all commands (those the scripts ran included)
// redis-server has run, from INFO commandstats read by redis-cli.
func counts(b *testing.B, srv *testserver.Redis) (scripts, cmds int) {
	out, err := srv.CLI(b, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(out) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		cmds += n
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += n
		}
	}
	return scripts, cmds
}

// BenchmarkAcquireRelease: one caller's Acquire+Release of a set of 1, 4
// and 16 keys on a real redis-server, against a Locker's Acquire+Release
// of one key (lock). scripts/op counts the scripts the server ran for
// each Acquire+Release (INFO commandstats around the loop): one round trip
// each, so 2 whatever the set's size; cmds/op counts every command, those
// inside the scripts included (minus INFO's own).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := testserver.StartRedis(b)
	be, err := redis.New(srv.Client(b, nil), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	measure := func(b *testing.B, op func()) {
		op() // scripts loaded, connections open
		s0, c0 := counts(b, srv)
		n := 0
		for b.Loop() {
			op()
			n++
		}
		s1, c1 := counts(b, srv)
		b.ReportMetric(float64(s1-s0)/float64(n), "scripts/op")
		b.ReportMetric(float64(c1-c0-1)/float64(n), "cmds/op")
	}
	b.Run("lock", func(b *testing.B) {
		l, err := fencedlock.New(be, fencedlock.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		measure(b, func() {
			ls, err := l.Acquire(b.Context(), "bench-lock")
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(b.Context()); err != nil {
				b.Fatal(err)
			}
		})
	})
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m, err := multilock.New(be, fencedlock.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench-set-%02d", i)
			}
			measure(b, func() {
				ls, err := m.Acquire(b.Context(), keys)
				if err != nil {
					b.Fatal(err)
				}
				if err := ls.Release(b.Context()); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
