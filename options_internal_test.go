package fencedlock

import (
	"testing"
	"time"
)

// TestTimingNoAllocs: resolving a call without options allocates nothing;
// with options, only the one record the options fill in.
func TestTimingNoAllocs(t *testing.T) {
	o, err := Options{TTL: time.Minute}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	l := &Locker{opts: o} // timing reads only the options
	with := []LeaseOption{WithTTL(time.Second), WithManualRenew(true)}
	for _, c := range []struct {
		name string
		opts []LeaseOption
		want float64
	}{{"none", nil, 0}, {"WithTTL+WithManualRenew", with, 1}} {
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := l.timing(c.opts); err != nil {
				t.Fatal(err)
			}
		}); n != c.want {
			t.Errorf("%s: %v allocations resolving the options, want %v", c.name, n, c.want)
		}
	}
}
