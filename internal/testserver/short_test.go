package testserver

import "testing"

// skipped reports whether f skipped the subtest it ran in.
func skipped(t *testing.T, name string, f func(t *testing.T)) bool {
	var s bool
	t.Run(name, func(t *testing.T) {
		defer func() { s = t.Skipped() }()
		f(t)
	})
	return s
}

// TestShortStartsNoServer: under -short every starter skips its test before
// it starts a process, so go test -short ./... starts no server; without
// -short, SkipShort lets the test run (make test skips nothing).
func TestShortStartsNoServer(t *testing.T) {
	if got := skipped(t, "SkipShort", func(t *testing.T) { SkipShort(t, "nothing") }); got != testing.Short() {
		t.Fatalf("SkipShort skipped = %v with testing.Short() = %v", got, testing.Short())
	}
	if !testing.Short() {
		return // the starters run for real in the other tests of this package
	}
	starters := map[string]func(t *testing.T){
		"StartRedis":        func(t *testing.T) { StartRedis(t) },
		"StartRedisCluster": func(t *testing.T) { StartRedisCluster(t, 3) },
		"StartSentinels":    func(t *testing.T) { StartSentinels(t, &Redis{Port: 1}, 3, SentinelOptions{}) },
		"StartPostgres":     func(t *testing.T) { StartPostgres(t) },
		"Binary":            func(t *testing.T) { Binary(t, "redis-cli") },
	}
	for name, start := range starters {
		if !skipped(t, name, start) {
			t.Errorf("%s did not skip under -short", name)
		}
	}
}
