package fencedlock

import "time"

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
