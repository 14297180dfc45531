package conformance_test

import (
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The holder's own Acquire again (a client's retry whose first reply was
// lost) may be refused as held, as the reference backend and
// backend/memory do, or granted, as backend/redis's acquire.lua does: the
// holder's fence again and the lease set to the TTL asked. These two
// modes of the reference backend grant it, correctly (regrantRepeat, a
// correct variant), without setting the lease (bugRepeatKeepsExpiry), or
// with the fence read from a record it does not check
// (bugRepeatTrustsRecord).
// Their values lie outside the iota list of reference_test.go.
const (
	// regrantRepeat: the holder's repeated Acquire is granted its fence
	// again, the lease set to the TTL asked (acquire.lua).
	regrantRepeat bug = 1 << 21
	// bugRepeatKeepsExpiry: the holder's repeated Acquire is granted its
	// fence again and the TTL asked, but the store keeps the old expiry
	// (a retry answered from an idempotency cache, or acquire.lua without
	// its PEXPIRE): a lease shorter than the grant says.
	bugRepeatKeepsExpiry bug = 1 << 22
	// bugRepeatTrustsRecord: the holder's repeated Acquire is granted the
	// fence its record holds, read as a number however it is written
	// (Lua's tonumber; acquire.lua without its check of the record): a
	// record the backend never wrote ("0", beyond the greatest fence)
	// becomes a grant.
	bugRepeatTrustsRecord bug = 1 << 23
	// bugRepeatNeedsRecord: the holder's repeated Acquire reads the fence
	// record to grant the holder's fence again and fails with an error
	// that is neither ErrPermanent nor ErrNotAcquired when the record is
	// absent (acquire.lua without its `not fence` test: `#fence` of nil
	// fails the script, an error the Locker retries as transient).
	bugRepeatNeedsRecord bug = 1 << 26
	// bugRepeatRefusedSetsTTL: the holder's repeated Acquire of a key
	// whose fence record it does not accept sets the lease to the TTL
	// asked, then answers "held" (acquire.lua without its test of a
	// record below 1: PEXPIRE, then a fence of 0, read as held): a
	// refusal that shortens the holder's lease.
	bugRepeatRefusedSetsTTL bug = 1 << 27
)

func init() {
	correctVariants = append(correctVariants, variant{name: "regrant", make: plain(regrantRepeat)})
	addExclusive("RepeatKeepsExpiry", "LeaseLengths", bugRepeatKeepsExpiry)  // only LeaseLengths repeats a holder's Acquire
	addExclusive("RepeatTrustsRecord", "FenceRecord", bugRepeatTrustsRecord) // only FenceRecord puts a record under a held key
	addExclusive("RepeatNeedsRecord", "FenceRecord", bugRepeatNeedsRecord)   // only FenceRecord deletes a held key's record
	addExclusive("RepeatRefusedSetsTTL", "FenceRecord", bugRepeatRefusedSetsTTL)
}

// regrants reports whether the store grants a holder's repeated Acquire.
func (s *refStore) regrants() bool {
	return s.bug == regrantRepeat || s.bug == bugRepeatKeepsExpiry || s.bug == bugRepeatTrustsRecord || s.bug == bugRepeatNeedsRecord || s.bug == bugRepeatRefusedSetsTTL
}

// regrant grants l's holder its Acquire req of key again (s.mu held): its
// fence, and the lease set to req.TTL from now (except with
// bugRepeatKeepsExpiry).
func (s *refStore) regrant(key string, req driver.AcquireRequest, l *refLock, now time.Time) driver.Grant {
	ttl := s.enforced(req.TTL)
	if s.bug != bugRepeatKeepsExpiry {
		l.expires = now.Add(ttl)
	}
	fence := l.fence
	if s.bug == bugRepeatTrustsRecord {
		fence = s.looseRecord(key)
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: fence, TTL: ttl, Sent: now}
}

// looseRecord is key's fence record read as a number however it is
// written, as Lua's tonumber reads it (bugRepeatTrustsRecord).
func (s *refStore) looseRecord(key string) fencing.Token {
	rec, bad := s.badFence[key]
	if !bad {
		return s.fences[key]
	}
	f, err := strconv.ParseFloat(rec.Value, 64)
	if err != nil || f < 0 {
		return 0
	}
	return fencing.Token(f)
}
