package otelfencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/internal/testserver"
	otelfencedlock "github.com/fencedlock/fencedlock/otel"
)

// secretKey names a business object: it must not reach telemetry unless
// WithKeyAttribute.
const secretKey = "payroll/employee-4711"

// telemetryText returns every string of the recorded telemetry: each
// ended span's name, status, attributes, and its events' names and
// attributes (the exception.message of RecordError), and every metric
// data point's attributes.
func (tm *telemetry) telemetryText(t *testing.T) []string {
	t.Helper()
	var out []string
	kvs := func(where string, kv []attribute.KeyValue) {
		for _, a := range kv {
			out = append(out, fmt.Sprintf("%s: %s=%s", where, a.Key, a.Value.String()))
		}
	}
	for _, s := range tm.spans.Ended() {
		out = append(out, "span "+s.Name()+" status: "+s.Status().Description)
		kvs("span "+s.Name(), s.Attributes())
		for _, e := range s.Events() {
			out = append(out, "span "+s.Name()+" event "+e.Name)
			kvs("span "+s.Name()+" event "+e.Name, e.Attributes)
		}
	}
	for name, m := range tm.metrics(t) {
		for _, s := range attributeSets(m) {
			kvs("metric "+name, s.ToSlice())
		}
	}
	return out
}

// keyLeak runs, on a Redis backend whose server has stopped (every call
// fails with "dial tcp ..."), a TryAcquire, a blocking Acquire, the
// Release of a lease taken before the stop, and a Do whose function's error
// names the key, all of secretKey, and returns the telemetry recorded.
func keyLeak(t *testing.T, opts ...otelfencedlock.Option) (*telemetry, []string) {
	tm := newTelemetry(t, opts...)
	srv := testserver.StartRedis(t)
	b, err := redis.New(srv.Client(t, nil), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l := locker(t, b, tm.obs.Trace(), fencedlock.Options{TTL: 10 * time.Second, ReleaseTimeout: time.Second})
	ctx := context.Background()
	err = l.Do(ctx, secretKey, func(context.Context, *fencedlock.Lease) error {
		return fmt.Errorf("updating %s: %w", secretKey, errors.ErrUnsupported)
	})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Do: %v", err)
	}
	ls, err := l.TryAcquire(ctx, secretKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop() // unreachable from now on
	if err := ls.Release(ctx); err == nil || !strings.Contains(err.Error(), secretKey) {
		t.Fatalf("Release with the server stopped: %v, want an error naming the key (what the telemetry must not show)", err)
	}
	if _, err := l.TryAcquire(ctx, secretKey); err == nil || !strings.Contains(err.Error(), secretKey) {
		t.Fatalf("TryAcquire with the server stopped: %v, want an error naming the key", err)
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(actx, secretKey); err == nil || !strings.Contains(err.Error(), secretKey) {
		t.Fatalf("Acquire with the server stopped: %v, want an error naming the key", err)
	}
	return tm, tm.telemetryText(t)
}

// TestNoKeyInTelemetry: without WithKeyAttribute no span (attribute,
// status, event: the exception.message of a recorded error) and no metric
// carries the lock key, although the errors of an unreachable server name
// it; the recorded errors still say what failed.
func TestNoKeyInTelemetry(t *testing.T) {
	_, text := keyLeak(t)
	exceptions := 0
	for _, s := range text {
		if strings.Contains(s, "payroll") || strings.Contains(s, "4711") {
			t.Errorf("the key leaks: %s", s)
		}
		if strings.Contains(s, "exception.message=") {
			exceptions++
			t.Log(s)
		}
	}
	// The blocking Acquire ends with its context: not acquired, no error
	// recorded (its span's events carry error.type only).
	if exceptions != 3 {
		t.Fatalf("%d errors recorded, want those of Do, Release and TryAcquire:\n%s", exceptions, strings.Join(text, "\n"))
	}
}

// TestKeyInTelemetryWithKeyAttribute: with WithKeyAttribute the recorded
// errors keep the key as they are.
func TestKeyInTelemetryWithKeyAttribute(t *testing.T) {
	_, text := keyLeak(t, otelfencedlock.WithKeyAttribute())
	found := 0
	for _, s := range text {
		if strings.Contains(s, "exception.message=") && strings.Contains(s, secretKey) {
			found++
		}
	}
	if found != 3 {
		t.Fatalf("%d recorded errors name the key with WithKeyAttribute, want 3:\n%s", found, strings.Join(text, "\n"))
	}
}
