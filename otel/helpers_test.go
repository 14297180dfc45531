package otelfencedlock_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/locktrace"
	otelfencedlock "github.com/fencedlock/fencedlock/otel"
)

// telemetry is an otelfencedlock.Observer on in-memory SDK providers.
type telemetry struct {
	obs    *otelfencedlock.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T, opts ...otelfencedlock.Option) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := otelfencedlock.New(append([]otelfencedlock.Option{otelfencedlock.WithMeterProvider(mp), otelfencedlock.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{obs: obs, reader: reader, spans: sr, tp: tp}
}

// metrics collects the current metrics.
func (tm *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelfencedlock.ScopeName {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// match reports whether set has every attribute of want.
func match(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum is the value of counter or up-down counter name over the data points
// with the attributes want.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	var n int64
	for _, dp := range s.DataPoints {
		if match(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

// hist is the count, sum and max of histogram name over the data points
// with the attributes want.
func hist(t *testing.T, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) (count uint64, total, most float64) {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0, 0, 0
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, m.Data)
	}
	if m.Unit != "s" {
		t.Fatalf("%s has unit %q, want s", name, m.Unit)
	}
	for _, dp := range h.DataPoints {
		if match(dp.Attributes, want) {
			count += dp.Count
			total += dp.Sum
			if v, ok := dp.Max.Value(); ok && v > most {
				most = v
			}
		}
	}
	return count, total, most
}

// attributeSets returns the attribute sets of m's data points (the
// counters' and the histograms').
func attributeSets(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	}
	return sets
}

// noKeyAttribute fails t if any metric or span carries fencedlock.key.
func (tm *telemetry) noKeyAttribute(t *testing.T, ms map[string]metricdata.Metrics) {
	t.Helper()
	for name, m := range ms {
		for _, s := range attributeSets(m) {
			if s.HasValue(otelfencedlock.AttrKey) {
				t.Fatalf("%s carries the key without WithKeyAttribute", name)
			}
		}
	}
	for _, s := range tm.spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == otelfencedlock.AttrKey {
				t.Fatalf("span %s carries the key without WithKeyAttribute", s.Name())
			}
		}
	}
}

// ended returns the ended spans named name, in end order.
func (tm *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// spanOf returns the ended span name whose fence attribute is fence.
func (tm *telemetry) spanOf(t *testing.T, name string, fence fencing.Token) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tm.ended(name) {
		if v, ok := attr(s, otelfencedlock.AttrFence); ok && v.AsInt64() == int64(fence) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s spans with fence %d, want 1; spans: %s", len(found), name, fence, tm.describe())
	}
	return found[0]
}

func (tm *telemetry) describe() string {
	var lines []string
	for _, s := range tm.spans.Ended() {
		var kv []string
		for _, a := range s.Attributes() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
		}
		var ev []string
		for _, e := range s.Events() {
			ev = append(ev, e.Name)
		}
		lines = append(lines, fmt.Sprintf("%s{%s}%v", s.Name(), strings.Join(kv, ","), ev))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// waitKinds returns the kinds of a span's fencedlock.wait events.
func waitKinds(s sdktrace.ReadOnlySpan) []string {
	var kinds []string
	for _, e := range s.Events() {
		if e.Name != "fencedlock.wait" {
			continue
		}
		for _, a := range e.Attributes {
			if a.Key == otelfencedlock.AttrWaitKind {
				kinds = append(kinds, a.Value.AsString())
			}
		}
	}
	return kinds
}

// signal is a Trace that passes every event on to an Observer and
// reports each wait.
type signal struct {
	tr    *locktrace.Trace
	waits chan locktrace.WaitKind
}

func newSignal(o *otelfencedlock.Observer) *signal {
	s := &signal{tr: o.Trace(), waits: make(chan locktrace.WaitKind, 1000)}
	s.tr.AcquireWait = func(ctx context.Context, e locktrace.AcquireWaitEvent) {
		o.AcquireWait(ctx, e)
		s.waits <- e.Kind
	}
	return s
}

// await returns when the n-th wait of kind was reported.
func (s *signal) await(t *testing.T, kind locktrace.WaitKind, n int) {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case k := <-s.waits:
			if k == kind {
				if n--; n == 0 {
					return
				}
			}
		case <-timeout.C:
			t.Fatalf("no %s wait within 30s", kind)
		}
	}
}

// store is what a scenario needs from a lock store.
type store struct {
	name        string                            // the backend name in events
	backend     func(t *testing.T) driver.Backend // a new backend (another process)
	del         func(t *testing.T, key string)    // deletes key's lock behind its holder's back
	waitKind    locktrace.WaitKind                // how a waiter behind a holder is reported
	waitsBefore int                               // waits of waitKind after which a release is announced
	ttl         time.Duration
}
