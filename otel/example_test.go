package otelfencedlock_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	otelfencedlock "github.com/fencedlock/fencedlock/otel"
)

// A Locker's metrics served to Prometheus: the OpenTelemetry Prometheus
// exporter is the meter provider's reader, registered on a Prometheus
// registry that promhttp serves on /metrics. The example runs on the
// memory backend; with Redis or etcd only the backend changes.
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	obs, err := otelfencedlock.New(otelfencedlock.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}

	locker, err := fencedlock.New(memory.New(), fencedlock.Options{TTL: 10 * time.Second, Trace: obs.Trace()})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	err = locker.Do(context.Background(), "orders", func(ctx context.Context, l *fencedlock.Lease) error {
		return nil // the guarded work
	})
	if err != nil {
		panic(err)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "fencedlock_") && (strings.Contains(line, "_count") || !strings.Contains(line, "_bucket") && !strings.Contains(line, "_sum")) {
			fmt.Println(line)
		}
	}
	// Output:
	// fencedlock_acquire_duration_seconds_count{fencedlock_acquire_blocking="true",fencedlock_acquire_outcome="acquired",fencedlock_backend="memory"} 1
	// fencedlock_acquire_wait_duration_seconds_count{fencedlock_acquire_outcome="acquired",fencedlock_backend="memory"} 1
	// fencedlock_critical_section_duration_seconds_count{fencedlock_backend="memory",fencedlock_lease_lost="false"} 1
	// fencedlock_lease_active{fencedlock_backend="memory"} 0
	// fencedlock_lease_held_duration_seconds_count{fencedlock_backend="memory",fencedlock_lease_end_cause="released"} 1
	// fencedlock_release_duration_seconds_count{fencedlock_backend="memory",fencedlock_release_outcome="released"} 1
}
