package redisscript

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// RWLockLua is the read-write lock's script (rwlock.lua): acquire, renew
// and release of read and write leases.
var RWLockLua = mustCompose("rwlock.lua")

// RWInspectLua is the read-write lock's inspection (rwinspect.lua).
var RWInspectLua = mustCompose("rwinspect.lua")

// ReadRWInspect reads vals, the reply of rwinspect.lua, as the InspectRW
// of name: owner tokens become holder ids, readers sort by fence.
func ReadRWInspect(name string, vals []Value) (driver.RWInfo, error) {
	var info driver.RWInfo
	bad := func(what string, err error) (driver.RWInfo, error) {
		return driver.RWInfo{}, fmt.Errorf("redis: inspect read-write lock %q: %s: %w", name, what, err)
	}
	if len(vals) < 4 || (len(vals)-4)%3 != 0 {
		return bad(fmt.Sprintf("unexpected reply of %d values", len(vals)), ErrCorrupt)
	}
	fence := func(v Value) (fencing.Token, bool, error) {
		s, found, err := v.Text()
		if err != nil || !found {
			return 0, found, err
		}
		f, ok := ParseFence(s)
		if !ok {
			return 0, true, fmt.Errorf("fence %q: %w", s, ErrCorrupt)
		}
		return f, true, nil
	}
	f, _, err := fence(vals[2])
	if err != nil {
		return bad("fence counter", err)
	}
	info.Fence = f
	intents, err := vals[3].Int()
	if err != nil {
		return bad("intents", err)
	}
	info.Intents = int(intents)
	owner, held, err := vals[0].Text()
	if err != nil {
		return bad("writer", err)
	}
	if held {
		pttl, err := vals[1].Int()
		if err != nil {
			return bad("writer TTL", err)
		}
		info.Writer = &driver.RWLease{Holder: driver.HolderID(owner), Fence: f, TTL: time.Duration(max(pttl, 0)) * time.Millisecond}
	}
	for i := 4; i < len(vals); i += 3 {
		owner, _, err := vals[i].Text()
		if err != nil {
			return bad("reader", err)
		}
		ms, err := vals[i+1].Int()
		if err != nil {
			return bad("reader TTL", err)
		}
		f, found, err := fence(vals[i+2])
		if err != nil || !found {
			return bad("reader fence", cmp.Or(err, ErrCorrupt))
		}
		info.Readers = append(info.Readers, driver.RWLease{Holder: driver.HolderID(owner), Fence: f, TTL: time.Duration(ms) * time.Millisecond})
	}
	slices.SortFunc(info.Readers, func(a, b driver.RWLease) int { return cmp.Compare(a.Fence, b.Fence) })
	return info, nil
}
