// Package fencing holds fencing tokens and the rule a guarded resource applies
// to them, so that a lock holder that was paused past its lease cannot
// overwrite state written by a later holder.
//
// A lock alone cannot stop a late write: holder A is paused (GC, SIGSTOP, a VM
// stall), its lease expires, B acquires and writes, then A resumes and writes
// too. A fence can, if the resource remembers the highest token it has
// accepted and applies [Check] atomically with every write:
//
//   - a token greater than the highest accepted one is accepted;
//   - an equal token is accepted only from the same holder (a non-secret id
//     derived from the lease, never the owner token), so a token duplicated by
//     a Redis failover cannot let two holders write;
//   - anything older is rejected with an error wrapping [ErrStale], and
//     nothing is written.
//
// [Guard] applies the rule in process. The backends ship the same rule for
// state kept in Redis (a Lua script), etcd (a Txn) and SQL databases.
package fencing

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// Token is a fencing token: every lease granted on a key carries a token
// strictly greater than every token granted on that key before it. The zero
// Token is never granted; it means "no token".
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalText encodes the token in decimal.
func (t Token) MarshalText() ([]byte, error) {
	return strconv.AppendUint(nil, uint64(t), 10), nil
}

// UnmarshalText decodes a decimal token.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseToken parses a decimal token as written by [Token.String].
func ParseToken(s string) (Token, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fencing: invalid token %q: %w", s, ErrInvalidToken)
	}
	return Token(v), nil
}

var (
	// ErrStale is wrapped by every rejection of a write whose token is older
	// than the newest accepted one, or equal to it but from another holder.
	ErrStale = errors.New("fencing: stale token")
	// ErrInvalidToken is returned for a token that cannot be parsed or is zero
	// where a granted token is required.
	ErrInvalidToken = errors.New("fencing: invalid token")
)

// StaleError describes a rejected write. It wraps [ErrStale].
type StaleError struct {
	Token        Token  // the token presented
	Holder       string // the holder id presented
	Accepted     Token  // the highest token accepted so far
	AcceptedFrom string // the holder id that presented Accepted
}

func (e *StaleError) Error() string {
	if e.Token == e.Accepted {
		return fmt.Sprintf("fencing: stale token: %d is already held by another holder", e.Token)
	}
	return fmt.Sprintf("fencing: stale token: %d is older than accepted %d", e.Token, e.Accepted)
}

// Unwrap returns [ErrStale].
func (e *StaleError) Unwrap() error { return ErrStale }

// Check applies the guard rule: it returns nil when a write carrying token
// from holder may be applied to a resource whose highest accepted token is
// accepted (written by acceptedHolder), and a *StaleError otherwise. A zero
// token is always rejected with [ErrInvalidToken]. An equal token is
// accepted only from a non-empty holder id equal to acceptedHolder: an
// unidentified writer never matches.
func Check(accepted Token, acceptedHolder string, token Token, holder string) error {
	if token == 0 {
		return fmt.Errorf("fencing: zero token: %w", ErrInvalidToken)
	}
	switch {
	case token > accepted:
		return nil
	case token == accepted && holder != "" && holder == acceptedHolder:
		return nil
	}
	return &StaleError{Token: token, Holder: holder, Accepted: accepted, AcceptedFrom: acceptedHolder}
}

// Guard protects an in-process resource. Its zero value is ready to use and
// has accepted no token. A Guard must not be copied after first use.
type Guard struct {
	mu     sync.Mutex
	token  Token
	holder string
}

// Do runs write if [Check] accepts token from holder, holding the guard's
// lock while it runs, so the check and the write are one atomic step with
// respect to every other Do. If write returns nil, token becomes the highest
// accepted token; if it returns an error, nothing is recorded and the error
// is returned. A rejected write is not run and the *StaleError is returned.
func (g *Guard) Do(token Token, holder string, write func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := Check(g.token, g.holder, token, holder); err != nil {
		return err
	}
	if write != nil {
		if err := write(); err != nil {
			return err
		}
	}
	g.token, g.holder = token, holder
	return nil
}

// Accepted returns the highest token accepted so far and its holder id.
func (g *Guard) Accepted() (Token, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.token, g.holder
}
