//go:build race

package redis

// raceEnabled: under the race detector sync.Pool drops a quarter of what
// is put back (rueidis pools its commands), so allocation counts grow.
const raceEnabled = true
