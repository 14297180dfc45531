package redisscript

import (
	"fmt"
	"strings"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// The guards of both backends (FencedSet, FencedHSet, FencedGet): their
// checks before anything is sent, and the reading of their replies.

// CheckResourceKey refuses keys a guard (op) must not write: empty ones
// and those inside prefix (the backend's KeyPrefix), where the backend
// keeps its locks.
func CheckResourceKey(op, key, prefix string) error {
	if key == "" {
		return fmt.Errorf("redis: %s: empty key: %w", op, driver.ErrInvalid)
	}
	if strings.HasPrefix(key, prefix) {
		return fmt.Errorf("redis: %s %q: key inside the backend's KeyPrefix %q: %w", op, key, prefix, driver.ErrInvalid)
	}
	return nil
}

// ValuePairs is the field-value list of FencedSet of value.
func ValuePairs(value string) []string { return []string{ValueField, value} }

// HSetPairs is the field-value list of FencedHSet of fields to key; no
// fields is an error wrapping [driver.ErrInvalid].
func HSetPairs(key string, fields map[string]string) ([]string, error) {
	if len(fields) == 0 {
		return nil, fmt.Errorf("redis: fenced hset %q: no fields: %w", key, driver.ErrInvalid)
	}
	pairs := make([]string, 0, 2*len(fields))
	for f, v := range fields {
		pairs = append(pairs, f, v)
	}
	return pairs, nil
}

// CheckFencedWrite checks a guarded write (op) of pairs to key under the
// backend's KeyPrefix prefix, before anything is sent: see FencedSet.
func CheckFencedWrite(op, key, prefix string, token fencing.Token, holder string, pairs []string) error {
	if err := CheckResourceKey(op, key, prefix); err != nil {
		return err
	}
	if err := CheckGuardArgs(op, key, token, holder); err != nil {
		return err
	}
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i] == FenceField || pairs[i] == HolderField {
			return fmt.Errorf("redis: %s %q: field %q is reserved for the fence record: %w", op, key, pairs[i], driver.ErrInvalid)
		}
	}
	return nil
}

// CheckGuardArgs checks the token and holder id of a guarded write (op)
// of key.
func CheckGuardArgs(op, key string, token fencing.Token, holder string) error {
	if token == 0 {
		return fmt.Errorf("redis: %s %q: zero token: %w", op, key, fencing.ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("redis: %s %q: empty holder id: %w", op, key, driver.ErrInvalid)
	}
	return nil
}

// FencedWriteArgs is ARGV of fenced_write.lua: the token, the holder id,
// then pairs.
func FencedWriteArgs(token fencing.Token, holder string, pairs []string) []string {
	args := make([]string, 0, 2+len(pairs))
	args = append(args, token.String(), holder)
	return append(args, pairs...)
}

// ReadFencedWrite reads vals, the reply of fenced_write.lua to a write
// (op) of key with token from holder: nil if the write was accepted, an
// error wrapping a *[fencing.StaleError] if it was rejected.
func ReadFencedWrite(op, key string, token fencing.Token, holder string, vals []Value) error {
	if len(vals) == 0 {
		return fmt.Errorf("redis: %s %q: empty reply", op, key)
	}
	ok, err := vals[0].Int()
	if err != nil {
		return fmt.Errorf("redis: %s %q: unexpected reply: %w", op, key, err)
	}
	if ok == 1 {
		return nil
	}
	if len(vals) != 3 {
		return fmt.Errorf("redis: %s %q: unexpected reply of %d values", op, key, len(vals))
	}
	fs, ok1, err1 := vals[1].Text()
	from, ok2, err2 := vals[2].Text()
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return fmt.Errorf("redis: %s %q: unreadable fence record in reply: %w", op, key, ErrCorrupt)
	}
	return Stale(op, key, token, holder, fs, from)
}

// Stale is the error of a guarded write (op) of key with token from
// holder, rejected by the fence record fence (in decimal) from holder
// from.
func Stale(op, key string, token fencing.Token, holder, fence, from string) error {
	accepted, err := fencing.ParseToken(fence)
	if err != nil {
		return fmt.Errorf("redis: %s %q: unreadable fence record in reply: %w", op, key, ErrCorrupt)
	}
	return fmt.Errorf("redis: %s %q: %w", op, key, &fencing.StaleError{
		Token: token, Holder: holder, Accepted: accepted, AcceptedFrom: from,
	})
}

// CheckGetKey checks the key of FencedGet.
func CheckGetKey(key string) error {
	if key == "" {
		return fmt.Errorf("redis: fenced get: empty key: %w", driver.ErrInvalid)
	}
	return nil
}

// GetFields are the fields FencedGet reads with HMGET, in this order.
var GetFields = []string{ValueField, FenceField, HolderField}

// ReadFencedGet reads vals, the reply of HMGET key GetFields..., as the
// record of key. wrap turns an error value of the reply into the
// backend's error.
func ReadFencedGet(key string, vals []Value, wrap func(error) error) (fencing.Record, error) {
	var r fencing.Record
	if len(vals) != 3 {
		return r, fmt.Errorf("redis: fenced get %q: unexpected reply of %d values", key, len(vals))
	}
	v, found, err := vals[0].Text()
	if err != nil {
		return fencing.Record{}, wrap(err)
	}
	r.Value, r.Found = v, found
	fs, found, err := vals[1].Text()
	if err != nil {
		return fencing.Record{}, wrap(err)
	}
	if found {
		t, perr := fencing.ParseToken(fs)
		if perr != nil || t == 0 || t.String() != fs { // the script's form: no sign, no leading zero
			return fencing.Record{}, fmt.Errorf("redis: fenced get %q: fence record %q: %w", key, fs, ErrCorrupt)
		}
		r.Fence = t
		r.Holder, _, _ = vals[2].Text()
	}
	return r, nil
}
