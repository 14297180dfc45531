package driver

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redact"
)

// redacted replaces an owner token when a value is printed.
const redacted = "[redacted]"

func redactOwner(owner string) string {
	if owner == "" {
		return ""
	}
	return redacted
}

// grantView is Grant without methods, to print it with the owner redacted.
type grantView struct {
	Key   string
	Owner string
	Fence fencing.Token
	TTL   time.Duration
	Sent  time.Time
	Data  any
}

func (g Grant) view() grantView {
	return grantView{Key: g.Key, Owner: redactOwner(g.Owner), Fence: g.Fence, TTL: g.TTL, Sent: g.Sent, Data: g.Data}
}

// Format implements [fmt.Formatter]: every verb prints the Grant with its
// owner token redacted.
func (g Grant) Format(f fmt.State, verb rune) { redact.Format(f, verb, "driver.Grant", g.view()) }

// String returns the Grant's fields with its owner token redacted.
func (g Grant) String() string { return fmt.Sprintf("%+v", g.view()) }

// LogValue implements [slog.LogValuer]: the Grant's key and fence, never its
// owner token.
func (g Grant) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", g.Key), slog.Uint64("fence", uint64(g.Fence)),
		slog.String("holder", HolderID(g.Owner)), slog.Duration("ttl", g.TTL))
}

// MarshalJSON encodes the Grant with its owner token redacted. A Grant is
// not a wire format; this only keeps the token out of logs.
func (g Grant) MarshalJSON() ([]byte, error) { return json.Marshal(g.view()) }

// requestView is AcquireRequest without methods.
type requestView struct {
	Key   string
	Owner string
	TTL   time.Duration
}

func (r AcquireRequest) view() requestView {
	return requestView{Key: r.Key, Owner: redactOwner(r.Owner), TTL: r.TTL}
}

// Format implements [fmt.Formatter]: every verb prints the request with
// its owner token redacted.
func (r AcquireRequest) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "driver.AcquireRequest", r.view())
}

// String returns the request's fields with its owner token redacted.
func (r AcquireRequest) String() string { return fmt.Sprintf("%+v", r.view()) }

// LogValue implements [slog.LogValuer]: the request's key and TTL, never
// its owner token.
func (r AcquireRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", r.Key), slog.String("holder", HolderID(r.Owner)), slog.Duration("ttl", r.TTL))
}

// MarshalJSON encodes the request with its owner token redacted.
func (r AcquireRequest) MarshalJSON() ([]byte, error) { return json.Marshal(r.view()) }
