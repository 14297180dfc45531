package fencedlock

import (
	"log/slog"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
)

// Limits and defaults. A zero field of [Options] takes the default below.
const (
	// MaxKeyLen is the longest key, in bytes, a Locker accepts.
	MaxKeyLen = driver.MaxKeyLen
	// MinTTL is the shortest lease a Locker accepts. Shorter leases leave
	// no room for a renewal round trip and the safety margin.
	MinTTL = driver.MinTTL
	// MaxTTL is the longest lease a Locker accepts. A crashed holder keeps a
	// key for up to its TTL, so longer leases are almost always mistakes.
	MaxTTL = driver.MaxTTL

	// DefaultTTL is the lease used when Options.TTL is zero.
	DefaultTTL = 10 * time.Second
	// DefaultRenewDivisor sets the default renew interval: TTL/3.
	DefaultRenewDivisor = 3
	// DefaultSafetyDivisor sets the default safety margin: TTL/10 (plus 1ms).
	DefaultSafetyDivisor = 10
	// DefaultMinRetryDelay is the first backoff of a waiting Acquire (its
	// first sleep lies in [DefaultMinRetryDelay/2, DefaultMinRetryDelay]).
	DefaultMinRetryDelay = 5 * time.Millisecond
	// DefaultMaxRetryDelay caps the backoff of a waiting Acquire.
	DefaultMaxRetryDelay = time.Second
	// DefaultReleaseTimeout bounds a Release, which runs detached from the
	// caller's cancellation.
	DefaultReleaseTimeout = driver.DefaultReleaseTimeout
)

// Options configures a [Locker]. The zero value means the documented
// defaults.
type Options struct {
	// TTL is the lease the server applies on acquire and on every renewal.
	// Default DefaultTTL; it must lie within [MinTTL, MaxTTL].
	TTL time.Duration
	// RenewInterval is how often the watchdog renews a held lease.
	// Default TTL/3. It must be shorter than TTL minus SafetyMargin.
	RenewInterval time.Duration
	// SafetyMargin is subtracted from every lease to form the holder's local
	// deadline: the lease is reported lost that long before the server could
	// expire it, to absorb clock drift and delivery delays. Default
	// TTL/10 + 1ms. It must be shorter than TTL/2.
	SafetyMargin time.Duration
	// MinRetryDelay and MaxRetryDelay bound the exponential backoff of a
	// waiting Acquire when the backend gives no better signal: the backoff
	// d starts at MinRetryDelay and doubles up to MaxRetryDelay, and each
	// sleep is drawn from [d/2, d]. MaxRetryDelay also bounds a wait for a
	// release notification. Defaults DefaultMinRetryDelay and
	// DefaultMaxRetryDelay.
	MinRetryDelay time.Duration
	MaxRetryDelay time.Duration
	// ReleaseTimeout bounds Release, Close and the cleanup after a failed
	// Acquire (see Lease.Release and Locker.Close for calls a backend does
	// not abort when their context ends). Default DefaultReleaseTimeout.
	// A Lease.Release is given between 31/32 of it and all of it: Releases
	// that start close together share one deadline (no timer each).
	ReleaseTimeout time.Duration
	// ManualRenew turns the watchdog's renewals off (and a KeepAliver
	// backend's): leases are renewed only by Lease.Renew. The local
	// deadline is still enforced.
	ManualRenew bool
	// Logger receives debug and warning records (keys, fences and holder ids;
	// never owner tokens). Default: no logging.
	Logger *slog.Logger
	// Trace receives the events of acquires, waits, renewals, releases and
	// losses, for metrics and traces (see package [locktrace]; a nil field
	// reports nothing). New keeps a copy. Default: none, at no cost.
	Trace *locktrace.Trace
}

func (o Options) resolve() (Options, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return o, invalidf("TTL %v out of range [%v, %v]", o.TTL, MinTTL, MaxTTL)
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = o.TTL/DefaultSafetyDivisor + time.Millisecond
	}
	if o.SafetyMargin < 0 || o.SafetyMargin >= o.TTL/2 {
		return o, invalidf("SafetyMargin %v out of range [0, TTL/2)", o.SafetyMargin)
	}
	if o.RenewInterval == 0 {
		o.RenewInterval = o.TTL / DefaultRenewDivisor
	}
	if o.RenewInterval < 0 || o.RenewInterval >= o.TTL-o.SafetyMargin {
		return o, invalidf("RenewInterval %v out of range (0, TTL-SafetyMargin)", o.RenewInterval)
	}
	if o.MinRetryDelay == 0 {
		o.MinRetryDelay = DefaultMinRetryDelay
	}
	if o.MaxRetryDelay == 0 {
		o.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if o.MinRetryDelay < 0 || o.MaxRetryDelay < o.MinRetryDelay {
		return o, invalidf("retry delays [%v, %v] invalid", o.MinRetryDelay, o.MaxRetryDelay)
	}
	if o.ReleaseTimeout == 0 {
		o.ReleaseTimeout = DefaultReleaseTimeout
	}
	if o.ReleaseTimeout < 0 {
		return o, invalidf("ReleaseTimeout %v negative", o.ReleaseTimeout)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// ValidateKey reports whether key is acceptable as a lock name: 1 to
// [MaxKeyLen] bytes. Any bytes are allowed, including slashes, braces,
// spaces and invalid UTF-8.
func ValidateKey(key string) error { return driver.ValidateKey(key) }

// A LeaseOption sets a per-lease option of one call of [Locker.Acquire],
// [Locker.TryAcquire] or [Locker.Do], in place of the Locker's [Options]
// for that lease only. Options are applied in order and validated as
// [New] validates Options: a value out of range makes the call fail with
// an error wrapping [ErrInvalid] before anything is sent to the backend.
// A call without options costs nothing extra.
type LeaseOption func(*leaseParams)

// leaseParams are a call's options as given (zero: not set).
type leaseParams struct {
	ttl, renew, margin time.Duration
	manual, manualSet  bool
}

// WithTTL sets the lease's TTL, within [MinTTL, MaxTTL]. Unless the call
// also sets them, the renew interval and the safety margin are then the
// defaults for this TTL (TTL/3 and TTL/10 + 1ms), not the Locker's. Zero
// keeps the Locker's TTL.
func WithTTL(ttl time.Duration) LeaseOption {
	return func(p *leaseParams) { p.ttl = ttl }
}

// WithRenewInterval sets how often the watchdog renews the lease (see
// Options.RenewInterval). Zero means the default for the lease's TTL.
func WithRenewInterval(d time.Duration) LeaseOption {
	return func(p *leaseParams) { p.renew = d }
}

// WithSafetyMargin sets the lease's safety margin (see
// Options.SafetyMargin). Zero means the default for the lease's TTL.
func WithSafetyMargin(d time.Duration) LeaseOption {
	return func(p *leaseParams) { p.margin = d }
}

// WithManualRenew sets whether the lease is renewed only by
// [Lease.Renew] (see Options.ManualRenew), whatever the Locker's option.
func WithManualRenew(manual bool) LeaseOption {
	return func(p *leaseParams) { p.manual, p.manualSet = manual, true }
}

// leaseTiming is what a lease's watchdog runs on: the resolved per-lease
// options.
type leaseTiming struct {
	ttl, renew, margin time.Duration
	manual             bool
}

// timing resolves a call's options against the Locker's. Without options
// it is the Locker's, and allocates nothing.
func (l *Locker) timing(opts []LeaseOption) (leaseTiming, error) {
	t := leaseTiming{ttl: l.opts.TTL, renew: l.opts.RenewInterval, margin: l.opts.SafetyMargin, manual: l.opts.ManualRenew}
	if len(opts) == 0 {
		return t, nil
	}
	var p leaseParams
	for _, o := range opts {
		if o != nil {
			o(&p)
		}
	}
	if p.manualSet {
		t.manual = p.manual
	}
	if p.ttl == 0 && p.renew == 0 && p.margin == 0 {
		return t, nil
	}
	o := l.opts // valid, Logger set: resolve checks only what changed
	if p.ttl != 0 {
		o.TTL, o.RenewInterval, o.SafetyMargin = p.ttl, p.renew, p.margin
	} else {
		if p.renew != 0 {
			o.RenewInterval = p.renew
		}
		if p.margin != 0 {
			o.SafetyMargin = p.margin
		}
	}
	o, err := o.resolve()
	if err != nil {
		return leaseTiming{}, err
	}
	t.ttl, t.renew, t.margin = o.TTL, o.RenewInterval, o.SafetyMargin
	return t, nil
}
