package multilock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/wakeset"
)

// The root fencedlock.Locker runs a set's lease: its watchdog renews it,
// reports its loss and refuses a grant that came back too late, and its
// clean-up releases a set whose acquire had an unknown outcome. It sees
// the set through view, a driver.Backend whose key is the set encoded
// (setKey): view turns each call into the MultiLocker's call on the keys.

// setPrefix starts the key of a set as the root Locker sees it (in its
// logs and errors): "multi:" and each key as its length, ':' and its
// bytes, in order, so that any bytes may appear in a key.
const setPrefix = "multi:"

// setKey encodes keys (sorted, without duplicates) as one key.
func setKey(keys []string) string {
	var b strings.Builder
	b.WriteString(setPrefix)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// parseSetKey decodes a key made by setKey.
func parseSetKey(s string) ([]string, error) {
	rest, ok := strings.CutPrefix(s, setPrefix)
	if !ok {
		return nil, fmt.Errorf("multilock: %q is not the key of a set: %w", s, driver.ErrInvalid)
	}
	var keys []string
	for len(rest) > 0 {
		if len(keys) > 0 {
			if rest[0] != ',' {
				return nil, fmt.Errorf("multilock: malformed set key: %w", driver.ErrInvalid)
			}
			rest = rest[1:]
		}
		ls, tail, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(ls)
		if !ok || err != nil || n < 1 || n > len(tail) {
			return nil, fmt.Errorf("multilock: malformed set key: %w", driver.ErrInvalid)
		}
		keys = append(keys, tail[:n])
		rest = tail[n:]
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("multilock: malformed set key: %w", driver.ErrInvalid)
	}
	return keys, nil
}

// fenceSink receives the fences of the grant that the root Locker hands
// out: Acquire puts one in the context of its call, and view fills it
// from every grant (the last one is the lease's: a grant refused as late
// is followed by another attempt or by an error).
type fenceSink struct {
	fences atomic.Pointer[[]fencing.Token]
}

type sinkKey struct{}

// view is the driver.Backend of sets on a MultiLocker.
type view struct{ m driver.MultiLocker }

var _ driver.Backend = view{}

// BackendName names the backend the view runs on in trace events (see
// [driver.Namer]), not this package.
func (v view) BackendName() string { return driver.Name(v.m) }

// grantOf returns the MultiGrant of g: the one Acquire made, or, for a
// Grant of Key and Owner only (the root Locker's clean-up), one of Keys
// and Owner.
func grantOf(g driver.Grant) (driver.MultiGrant, error) {
	if mg, ok := g.Data.(*driver.MultiGrant); ok {
		return *mg, nil
	}
	keys, err := parseSetKey(g.Key)
	if err != nil {
		return driver.MultiGrant{}, err
	}
	return driver.MultiGrant{Keys: keys, Owner: g.Owner}, nil
}

// Acquire takes every key of the set req.Key (AcquireMulti). The Grant's
// Fence is the fence of the set's first key (keys sorted): a key's fence,
// so that code that knows one fence per lease guards that key right; the
// keys' fences all go to the fenceSink of ctx.
func (v view) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	keys, err := parseSetKey(req.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	mg, err := v.m.AcquireMulti(ctx, driver.MultiRequest{Keys: keys, Owner: req.Owner, TTL: req.TTL})
	if err != nil {
		return driver.Grant{}, err
	}
	if len(mg.Fences) != len(keys) {
		return driver.Grant{}, fmt.Errorf("multilock: acquire: %d fences for %d keys", len(mg.Fences), len(keys))
	}
	if s, ok := ctx.Value(sinkKey{}).(*fenceSink); ok {
		f := slices.Clone(mg.Fences)
		s.fences.Store(&f)
	}
	return driver.Grant{Key: req.Key, Owner: req.Owner, Fence: mg.Fences[0], TTL: mg.TTL, Data: &mg}, nil
}

// Renew extends the set's lease (RenewMulti).
func (v view) Renew(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	mg, err := grantOf(g)
	if err != nil {
		return 0, err
	}
	return v.m.RenewMulti(ctx, mg, ttl)
}

// Release deletes the set's keys (ReleaseMulti).
func (v view) Release(ctx context.Context, g driver.Grant) error {
	mg, err := grantOf(g)
	if err != nil {
		return err
	}
	return v.m.ReleaseMulti(ctx, mg)
}

// Close does nothing: the backend belongs to the caller of New.
func (v view) Close() error { return nil }

// notifyView is the view of a MultiLocker that is also a
// [driver.Notifier] (memory, both Redis backends, etcd): the root Locker's
// waiter for a set watches every key of the set and is woken by the
// release of any of them (a set's release wakes the watchers of each of
// its keys too), then tries the whole set again.
type notifyView struct {
	view
	n driver.Notifier
}

var _ driver.Notifier = notifyView{}

// Watch watches every key of the set key.
func (v notifyView) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	keys, err := parseSetKey(key)
	if err != nil {
		return nil, nil, err
	}
	return wakeset.Watch(ctx, v.n, keys)
}

// newView returns the view of sets on m (b is m as a Backend).
func newView(b driver.Backend, m driver.MultiLocker) driver.Backend {
	if n, ok := b.(driver.Notifier); ok {
		return notifyView{view{m: m}, n}
	}
	return view{m: m}
}
