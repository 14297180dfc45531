package otelfencedlock

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/locktrace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/fencedlock/fencedlock/otel"

// Attribute keys (see the package documentation for where each appears).
const (
	AttrBackend       = attribute.Key("fencedlock.backend")
	AttrKey           = attribute.Key("fencedlock.key") // only with WithKeyAttribute
	AttrBlocking      = attribute.Key("fencedlock.acquire.blocking")
	AttrOutcome       = attribute.Key("fencedlock.acquire.outcome")
	AttrEndCause      = attribute.Key("fencedlock.lease.end.cause")
	AttrKeepAlive     = attribute.Key("fencedlock.renew.keepalive")
	AttrReleaseResult = attribute.Key("fencedlock.release.outcome")
	AttrLeaseLost     = attribute.Key("fencedlock.lease.lost")
	AttrFence         = attribute.Key("fencedlock.fence")
	AttrHolder        = attribute.Key("fencedlock.holder")
	AttrHandOff       = attribute.Key("fencedlock.acquire.handoff")
	AttrWaited        = attribute.Key("fencedlock.acquire.waited")
	AttrWaitKind      = attribute.Key("fencedlock.wait.kind")
	AttrRetryAfter    = attribute.Key("fencedlock.wait.retry_after")
	AttrErrorType     = attribute.Key("error.type")
)

// Option configures an [Observer].
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	withKey bool
}

// WithMeterProvider sets the meter provider. Default: the global one
// (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the tracer provider. Default: the global one
// (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithKeyAttribute adds the lock key as attribute fencedlock.key to every
// metric and span. Off by default: keys can be numerous (one series per
// key) and may name business objects.
func WithKeyAttribute() Option {
	return func(c *config) { c.withKey = true }
}

// Observer records a Locker's events as OpenTelemetry metrics and spans.
// Set its [Observer.Trace] as fencedlock.Options.Trace. It is safe for
// concurrent use and may serve several Lockers.
type Observer struct {
	tracer  trace.Tracer
	withKey bool

	acquireDur  metric.Float64Histogram
	waitDur     metric.Float64Histogram
	handoffs    metric.Int64Counter
	active      metric.Int64UpDownCounter
	heldDur     metric.Float64Histogram
	lost        metric.Int64Counter
	renewDur    metric.Float64Histogram
	releaseDur  metric.Float64Histogram
	criticalDur metric.Float64Histogram
}

// Trace returns the hooks that record into o, every one set: give it to
// fencedlock.Options.Trace. A caller may replace a field with a function
// that calls o's method of the same name and then does its own work.
func (o *Observer) Trace() *locktrace.Trace {
	return &locktrace.Trace{
		AcquireStart:  o.AcquireStart,
		AcquireWait:   o.AcquireWait,
		AcquireEnd:    o.AcquireEnd,
		Renewed:       o.Renewed,
		LeaseEnd:      o.LeaseEnd,
		CriticalStart: o.CriticalStart,
		CriticalEnd:   o.CriticalEnd,
		ReleaseStart:  o.ReleaseStart,
		ReleaseEnd:    o.ReleaseEnd,
	}
}

// Bucket boundaries, in seconds: short for single round trips, long for
// waits and holds.
var (
	shortBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	longBuckets  = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// New returns an Observer on the given (or global) providers.
func New(opts ...Option) (*Observer, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName), withKey: c.withKey}
	var errs []error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	o.acquireDur = hist("fencedlock.acquire.duration", "Duration of Acquire, TryAcquire and Do's acquire, by outcome.", longBuckets)
	o.waitDur = hist("fencedlock.acquire.wait.duration", "Time a blocking Acquire waited for another holder (0 if it did not).", longBuckets)
	o.handoffs = counter("fencedlock.acquire.handoffs", "{handoff}", "Blocking Acquires satisfied after a release notification or a server queue.")
	active, err := m.Int64UpDownCounter("fencedlock.lease.active", metric.WithUnit("{lease}"), metric.WithDescription("Leases held now."))
	errs = append(errs, err)
	o.active = active
	o.heldDur = hist("fencedlock.lease.held.duration", "How long leases were held, by how they ended.", longBuckets)
	o.lost = counter("fencedlock.lease.lost", "{lease}", "Leases lost, by cause.")
	o.renewDur = hist("fencedlock.renew.duration", "Round trip of lease renewals (error.type set on failures).", shortBuckets)
	o.releaseDur = hist("fencedlock.release.duration", "Duration of releases, by outcome.", shortBuckets)
	o.criticalDur = hist("fencedlock.critical_section.duration", "Duration of Do's function.", longBuckets)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// attrs returns the common attributes plus extra.
func (o *Observer) attrs(backend, key string, extra ...attribute.KeyValue) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 2+len(extra))
	a = append(a, AttrBackend.String(backend))
	if o.withKey {
		a = append(a, AttrKey.String(key))
	}
	return append(a, extra...)
}

func leaseAttrs(e locktrace.LeaseInfo) []attribute.KeyValue {
	return []attribute.KeyValue{AttrFence.Int64(int64(e.Fence)), AttrHolder.String(e.Holder)}
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// ErrorType is the error.type attribute value of err: a low-cardinality
// class of fencedlock's sentinel errors and context errors, "_OTHER" for
// the rest, "" for nil.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range errorTypes {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "_OTHER"
}

// errorTypes are the classes of ErrorType, the first that err matches
// (errors.Is) naming it.
var errorTypes = []struct {
	err  error
	name string
}{
	{fencedlock.ErrLeaseLost, "lease_lost"},
	{fencedlock.ErrNotHeld, "not_held"},
	{fencedlock.ErrClosed, "closed"},
	{fencedlock.ErrInvalid, "invalid"},
	{fencedlock.ErrPermanent, "permanent"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
	{fencedlock.ErrNotAcquired, "not_acquired"},
}

// fail records err on span (the event "exception", as span.RecordError
// does) and marks the span failed. Without WithKeyAttribute the recorded
// message has key replaced (see withoutKey): the errors of fencedlock and
// of its backends name the key, and of a function Do ran may too.
func (o *Observer) fail(span trace.Span, key string, err error) {
	if o.withKey {
		span.RecordError(err)
	} else if span.IsRecording() {
		span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
			semconv.ExceptionType(errorTypeName(err)),
			semconv.ExceptionMessage(withoutKey(err.Error(), key)),
		))
	}
	span.SetStatus(codes.Error, ErrorType(err))
	span.SetAttributes(AttrErrorType.String(ErrorType(err)))
}

// RedactedKey replaces the lock key in the error messages spans record
// without WithKeyAttribute.
const RedactedKey = "[key]"

// withoutKey returns msg with key replaced by RedactedKey: quoted as
// fencedlock's errors print it (%q), with Go's escapes inside quotes as
// %q writes them, and as it is (an etcd key path, a Redis key name).
func withoutKey(msg, key string) string {
	if key == "" {
		return msg
	}
	quoted := strconv.Quote(key)
	msg = strings.ReplaceAll(msg, quoted, strconv.Quote(RedactedKey))
	if inner := quoted[1 : len(quoted)-1]; inner != key {
		msg = strings.ReplaceAll(msg, inner, RedactedKey)
	}
	return strings.ReplaceAll(msg, key, RedactedKey)
}

// errorTypeName is the exception.type of err, as span.RecordError writes
// it: the package path and name of its type, or the type as Go prints it
// (a pointer, such as *fmt.wrapError).
func errorTypeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// AcquireStart starts the span fencedlock.acquire.
func (o *Observer) AcquireStart(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
	ctx, _ = o.tracer.Start(ctx, "fencedlock.acquire", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.attrs(e.Backend, e.Key, AttrBlocking.Bool(e.Blocking))...))
	return ctx
}

// AcquireWait adds the event fencedlock.wait to the acquire span.
func (o *Observer) AcquireWait(ctx context.Context, e locktrace.AcquireWaitEvent) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	a := []attribute.KeyValue{AttrWaitKind.String(string(e.Kind))}
	if e.RetryAfter > 0 {
		a = append(a, AttrRetryAfter.Float64(seconds(e.RetryAfter)))
	}
	if e.Err != nil {
		a = append(a, AttrErrorType.String(ErrorType(e.Err)))
	}
	span.AddEvent("fencedlock.wait", trace.WithAttributes(a...))
}

// AcquireEnd records the acquire metrics and ends the acquire span.
func (o *Observer) AcquireEnd(ctx context.Context, e locktrace.AcquireEndEvent) {
	extra := []attribute.KeyValue{AttrBlocking.Bool(e.Blocking), AttrOutcome.String(string(e.Outcome))}
	if e.Outcome == locktrace.AcquireErr {
		extra = append(extra, AttrErrorType.String(ErrorType(e.Err)))
	}
	o.acquireDur.Record(ctx, seconds(e.Duration), metric.WithAttributes(o.attrs(e.Backend, e.Key, extra...)...))
	base := metric.WithAttributes(o.attrs(e.Backend, e.Key)...)
	if e.Blocking {
		o.waitDur.Record(ctx, seconds(e.Waited), metric.WithAttributes(o.attrs(e.Backend, e.Key, AttrOutcome.String(string(e.Outcome)))...))
	}
	if e.Outcome == locktrace.Acquired {
		o.active.Add(ctx, 1, base)
		if e.HandOff {
			o.handoffs.Add(ctx, 1, base)
		}
	}

	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrOutcome.String(string(e.Outcome)), AttrWaited.Float64(seconds(e.Waited)))
	switch e.Outcome {
	case locktrace.Acquired:
		span.SetAttributes(append(leaseAttrs(e.LeaseInfo), AttrHandOff.Bool(e.HandOff))...)
	case locktrace.AcquireErr:
		o.fail(span, e.Key, e.Err)
	}
	span.End()
}

// Renewed records the renewal metrics: one renew.duration point per
// renewal, with error.type when it failed (the count of failures is that
// histogram's count with error.type; no second instrument repeats it).
func (o *Observer) Renewed(ctx context.Context, e locktrace.RenewEvent) {
	extra := []attribute.KeyValue{AttrKeepAlive.Bool(e.KeepAlive)}
	if e.Err != nil {
		extra = append(extra, AttrErrorType.String(ErrorType(e.Err)))
	}
	if e.Duration > 0 || e.Err != nil {
		o.renewDur.Record(ctx, seconds(e.Duration), metric.WithAttributes(o.attrs(e.Backend, e.Key, extra...)...))
	}
}

// LeaseEnd records the end of a lease: active leases, held duration and,
// for a loss, its cause.
func (o *Observer) LeaseEnd(e locktrace.LeaseEndEvent) {
	ctx := context.Background()
	o.active.Add(ctx, -1, metric.WithAttributes(o.attrs(e.Backend, e.Key)...))
	cause := metric.WithAttributes(o.attrs(e.Backend, e.Key, AttrEndCause.String(string(e.Cause)))...)
	o.heldDur.Record(ctx, seconds(e.Held), cause)
	if e.Cause != locktrace.EndReleased {
		o.lost.Add(ctx, 1, cause)
	}
}

// CriticalStart starts the span fencedlock.critical_section, the parent
// of the spans of Do's function.
func (o *Observer) CriticalStart(ctx context.Context, e locktrace.LeaseInfo) context.Context {
	ctx, _ = o.tracer.Start(ctx, "fencedlock.critical_section", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(o.attrs(e.Backend, e.Key), leaseAttrs(e)...)...))
	return ctx
}

// CriticalEnd records the critical section's duration and ends its span.
func (o *Observer) CriticalEnd(ctx context.Context, e locktrace.CriticalEndEvent) {
	o.criticalDur.Record(ctx, seconds(e.Duration), metric.WithAttributes(o.attrs(e.Backend, e.Key, AttrLeaseLost.Bool(e.Lost))...))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrLeaseLost.Bool(e.Lost))
	if e.Err != nil {
		o.fail(span, e.Key, e.Err)
	} else if e.Lost {
		span.SetStatus(codes.Error, "lease lost")
	}
	span.End()
}

// ReleaseStart starts the span fencedlock.release.
func (o *Observer) ReleaseStart(ctx context.Context, e locktrace.LeaseInfo) context.Context {
	ctx, _ = o.tracer.Start(ctx, "fencedlock.release", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(o.attrs(e.Backend, e.Key), leaseAttrs(e)...)...))
	return ctx
}

// ReleaseEnd records the release's duration and outcome and ends its span.
func (o *Observer) ReleaseEnd(ctx context.Context, e locktrace.ReleaseEndEvent) {
	extra := []attribute.KeyValue{AttrReleaseResult.String(string(e.Outcome))}
	if e.Outcome == locktrace.ReleaseErr {
		extra = append(extra, AttrErrorType.String(ErrorType(e.Err)))
	}
	o.releaseDur.Record(ctx, seconds(e.Duration), metric.WithAttributes(o.attrs(e.Backend, e.Key, extra...)...))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrReleaseResult.String(string(e.Outcome)))
	if e.Outcome == locktrace.ReleaseErr {
		o.fail(span, e.Key, e.Err)
	}
	span.End()
}
