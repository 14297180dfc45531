package fencedlock

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/redact"
)

// Owner tokens are secrets: whoever has one can renew and release the lock
// it holds. The types that carry one render it as redacted, whatever the
// fmt verb, in slog records and in JSON.

// leaseView is what a printed Lease shows.
type leaseView struct {
	Key    string
	Fence  fencing.Token
	Holder string
	TTL    time.Duration
}

func (ls *Lease) view() leaseView {
	return leaseView{Key: ls.grant.Key, Fence: ls.grant.Fence, Holder: ls.Holder(), TTL: ls.grant.TTL}
}

// Format implements [fmt.Formatter]: every verb prints the lease's key,
// fence, holder id and TTL, never its owner token.
func (ls *Lease) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "&fencedlock.Lease", ls.view())
}

// String returns the lease's key, fence, holder id and TTL.
func (ls *Lease) String() string { return fmt.Sprintf("%+v", ls.view()) }

// LogValue implements [slog.LogValuer]: the lease's key, fence and holder
// id, never its owner token.
func (ls *Lease) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", ls.grant.Key), slog.Uint64("fence", uint64(ls.grant.Fence)),
		slog.String("holder", ls.Holder()), slog.Duration("ttl", ls.grant.TTL))
}

// MarshalJSON encodes what a printed lease shows.
func (ls *Lease) MarshalJSON() ([]byte, error) { return json.Marshal(ls.view()) }
