package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redact"
)

// MaxMultiKeys is the largest set of keys a [MultiLocker] is asked to take
// at once (package multilock refuses larger sets with [ErrInvalid]).
const MaxMultiKeys = 64

// MultiLocker is implemented by backends that take a set of keys all or
// nothing in one step (package multilock builds its locks on it). The
// keys are the locks of [Backend] on the same store: a key held by a
// single-key lease is held for a set too, and the other way round.
//
// Besides the [Backend] contract on each key, a MultiLocker must
// guarantee:
//
//   - AcquireMulti takes every key of the set, or none: no other client
//     ever sees a part of the set taken by the request (not while it
//     runs, not after an error, not after a key was found held);
//   - each key gets its own fence, strictly greater than every fence
//     granted before on that key (by either kind of lease);
//   - the set has one lease: RenewMulti extends every key, or, when any
//     key is no longer the owner's, extends none and returns a
//     *[LostKeyError] naming that key (wrapping [ErrNotHeld]).
//
// The caller (package multilock) validates the set before calling: 1 to
// [MaxMultiKeys] keys, sorted, without duplicates, each valid for
// [ValidateKey].
type MultiLocker interface {
	// AcquireMulti makes one attempt to take every key of req.Keys for
	// req.Owner with one lease of req.TTL. If another owner holds any key
	// it changes nothing and returns a *[HeldError] for that key
	// (wrapping [ErrNotAcquired]). Grant.Fences[i] is the fence of
	// req.Keys[i].
	AcquireMulti(ctx context.Context, req MultiRequest) (MultiGrant, error)

	// RenewMulti extends the lease of every key of g to ttl if, and only
	// if, g.Owner still holds them all. It returns the TTL applied.
	RenewMulti(ctx context.Context, g MultiGrant, ttl time.Duration) (time.Duration, error)

	// ReleaseMulti deletes each key of g that g.Owner holds. It returns
	// nil if it deleted them all, else a *[LostKeyError] for the first
	// key it did not find held (wrapping [ErrNotHeld]). It must work on
	// a MultiGrant of Keys and Owner only (Fences nil): the clean-up
	// after an AcquireMulti whose outcome is unknown.
	ReleaseMulti(ctx context.Context, g MultiGrant) error
}

// MultiRequest is the input of [MultiLocker.AcquireMulti].
type MultiRequest struct {
	Keys  []string      // sorted, without duplicates
	Owner string        // the owner token: a secret, never printed
	TTL   time.Duration // the lease to apply on the server, to every key
}

// MultiGrant describes the lease of a set that a [MultiLocker] granted.
type MultiGrant struct {
	Keys   []string
	Owner  string          // the owner token: a secret, never printed
	Fences []fencing.Token // Fences[i] is the fence of Keys[i]
	TTL    time.Duration   // the lease the server applied, from the request's send
	Data   any             // private to the backend
}

// multiView is a MultiRequest or MultiGrant without methods and with its
// owner token redacted, for printing.
type multiView struct {
	Keys   []string
	Owner  string
	Fences []fencing.Token `json:",omitempty"`
	TTL    time.Duration
}

// Format implements [fmt.Formatter]: every verb prints the request with
// its owner token redacted.
func (r MultiRequest) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "driver.MultiRequest", multiView{Keys: r.Keys, Owner: redactOwner(r.Owner), TTL: r.TTL})
}

// LogValue implements [slog.LogValuer]: the keys and TTL, never the owner
// token.
func (r MultiRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("keys", r.Keys), slog.Duration("ttl", r.TTL))
}

// MarshalJSON encodes the request with its owner token redacted.
func (r MultiRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(multiView{Keys: r.Keys, Owner: redactOwner(r.Owner), TTL: r.TTL})
}

func (g MultiGrant) view() multiView {
	return multiView{Keys: g.Keys, Owner: redactOwner(g.Owner), Fences: g.Fences, TTL: g.TTL}
}

// Format implements [fmt.Formatter]: every verb prints the grant with its
// owner token redacted (and not its Data).
func (g MultiGrant) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "driver.MultiGrant", g.view())
}

// LogValue implements [slog.LogValuer]: keys, fences, holder id and TTL,
// never the owner token.
func (g MultiGrant) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("keys", g.Keys), slog.Any("fences", g.Fences),
		slog.String("holder", HolderID(g.Owner)), slog.Duration("ttl", g.TTL))
}

// MarshalJSON encodes the grant with its owner token redacted.
func (g MultiGrant) MarshalJSON() ([]byte, error) { return json.Marshal(g.view()) }

// LostKeyError reports the key of a set that its owner no longer holds
// (deleted, expired, evicted, taken by another owner). It wraps
// [ErrNotHeld].
type LostKeyError struct {
	Key string
}

func (e *LostKeyError) Error() string {
	return fmt.Sprintf("fencedlock: key %q of the set is no longer held", e.Key)
}

// Unwrap returns [ErrNotHeld].
func (e *LostKeyError) Unwrap() error { return ErrNotHeld }
