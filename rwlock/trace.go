package rwlock

import (
	"context"
	"path"
	"reflect"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/locktrace"
)

// Each mode's Locker runs on a view of the backend, a type of this
// package, and a Locker names its backend in trace events by the package
// of its Backend (Locker.BackendName): "rwlock", whatever the backend. The
// events of an RWLock name the backend it runs on instead ("memory",
// "redis", "goredis", "etcd"), as package otel's fencedlock.backend
// attribute promises.

// backendName is the name a Locker on b gives it (Locker.BackendName's
// rule: the last element of its type's package path).
func backendName(b driver.Backend) string {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return t.String()
}

// traceOptions returns opts whose Trace, if any, is a copy whose events
// carry the name of b.
func traceOptions(opts fencedlock.Options, b driver.Backend) fencedlock.Options {
	if opts.Trace != nil {
		opts.Trace = backendTrace(*opts.Trace, backendName(b))
	}
	return opts
}

// backendTrace returns t with the Backend of every event set to name.
func backendTrace(t locktrace.Trace, name string) *locktrace.Trace {
	if f := t.AcquireStart; f != nil {
		t.AcquireStart = func(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
			e.Backend = name
			return f(ctx, e)
		}
	}
	if f := t.AcquireWait; f != nil {
		t.AcquireWait = func(ctx context.Context, e locktrace.AcquireWaitEvent) { e.Backend = name; f(ctx, e) }
	}
	if f := t.AcquireEnd; f != nil {
		t.AcquireEnd = func(ctx context.Context, e locktrace.AcquireEndEvent) { e.Backend = name; f(ctx, e) }
	}
	if f := t.Renewed; f != nil {
		t.Renewed = func(ctx context.Context, e locktrace.RenewEvent) { e.Backend = name; f(ctx, e) }
	}
	if f := t.LeaseEnd; f != nil {
		t.LeaseEnd = func(e locktrace.LeaseEndEvent) { e.Backend = name; f(e) }
	}
	if f := t.CriticalStart; f != nil {
		t.CriticalStart = func(ctx context.Context, e locktrace.LeaseInfo) context.Context {
			e.Backend = name
			return f(ctx, e)
		}
	}
	if f := t.CriticalEnd; f != nil {
		t.CriticalEnd = func(ctx context.Context, e locktrace.CriticalEndEvent) { e.Backend = name; f(ctx, e) }
	}
	if f := t.ReleaseStart; f != nil {
		t.ReleaseStart = func(ctx context.Context, e locktrace.LeaseInfo) context.Context {
			e.Backend = name
			return f(ctx, e)
		}
	}
	if f := t.ReleaseEnd; f != nil {
		t.ReleaseEnd = func(ctx context.Context, e locktrace.ReleaseEndEvent) { e.Backend = name; f(ctx, e) }
	}
	return &t
}
