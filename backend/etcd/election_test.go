package etcd

import (
	"fmt"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// TestLeaderViewOrdersTwoWatches feeds a leaderView the events of the two
// watches of WatchLeader in the orders etcd may deliver them (the record
// watch and the queue watch are not ordered with each other) and checks
// the terms come out in order: a term's end seen before its beginning, a
// term beginning while another is current, a repeated record, a record of
// a term older than the newest, and the deletion of a waiter's entry.
func TestLeaderViewOrdersTwoWatches(t *testing.T) {
	term := func(f fencing.Token) driver.LeaderInfo {
		return driver.LeaderInfo{Held: true, Fence: f, Holder: "h", Value: []byte(fmt.Sprint("v", f))}
	}
	type step struct {
		begin fencing.Token // a leader record of this fence, or
		end   fencing.Token // the deletion of the entry created at this revision
	}
	for _, c := range []struct {
		name  string
		start driver.LeaderInfo
		steps []step
		want  string
	}{
		{"in order", driver.LeaderInfo{}, []step{{begin: 5}, {end: 5}, {begin: 9}, {end: 9}}, "[5 none 9 none]"},
		{"end before begin", driver.LeaderInfo{}, []step{{end: 5}, {begin: 5}}, "[5 none]"},
		{"next term before the end", driver.LeaderInfo{}, []step{{begin: 5}, {begin: 9}, {end: 5}, {end: 9}}, "[5 none 9 none]"},
		{"repeated and older records", term(7), []step{{begin: 7}, {begin: 5}, {end: 7}, {begin: 7}}, "[none]"},
		{"a waiter's entry deleted", term(7), []step{{end: 8}, {end: 7}}, "[none]"},
		{"a never proclaimed lease", driver.LeaderInfo{Fence: 7}, []step{{end: 8}, {begin: 9}, {end: 9}}, "[9 none]"},
		{"started with a term", term(7), []step{{end: 7}, {begin: 8}}, "[none 8]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newLeaderView(c.start)
			var got []string
			for _, s := range c.steps {
				var evs []driver.LeaderEvent
				if s.begin != 0 {
					evs = v.begin(term(s.begin))
				} else {
					evs = v.end(s.end)
				}
				for _, ev := range evs {
					if !ev.Held {
						got = append(got, "none")
						continue
					}
					if string(ev.Value) != fmt.Sprint("v", ev.Fence) {
						t.Fatalf("term %v delivered with value %q", ev.Fence, ev.Value)
					}
					got = append(got, fmt.Sprint(ev.Fence))
				}
			}
			if fmt.Sprint(got) != c.want {
				t.Fatalf("delivered %v, want %v", got, c.want)
			}
		})
	}
}

// TestLeaderViewFullEndedSet: a long term during which more than maxEnded
// waiters gave up (each deletion above the newest term is remembered, in
// case it is a term whose record is still on the other watch), then the
// next term's end seen before its beginning. The view must not report
// that term as current once it began: its end was seen.
func TestLeaderViewFullEndedSet(t *testing.T) {
	term := driver.LeaderInfo{Held: true, Fence: 50, Holder: "h", Value: []byte("v50")}
	v := newLeaderView(driver.LeaderInfo{Held: true, Fence: 7, Holder: "h", Value: []byte("v7")})
	for f := range fencing.Token(maxEnded) {
		v.end(1000 + f) // waiters queued after term 50's entry, gone
	}
	v.end(7)  // the long term ends
	v.end(50) // the next term ends, before its record is seen
	v.begin(term)
	if v.cur.Held {
		t.Fatalf("the view reports the term of fence %v as current after its end was seen", v.cur.Fence)
	}
	if !v.doubt {
		t.Fatal("the view dropped an end without asking for the state to be read again")
	}
}
