package etcd_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// TestClientLogger: the etcd client's records go to the slog.Logger given,
// the expected ones (a failed attempt whose error the caller gets; a revoke
// or keepalive of a lease that expired during a pause) at DEBUG, what
// remains at its own level with its fields.
func TestClientLogger(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lg := etcd.ClientLogger(log)
	// What the client logged after a pause (retry_interceptor.go).
	lg.Warn("retrying of unary invoker failed",
		zap.String("method", "/etcdserverpb.Lease/LeaseRevoke"),
		zap.Uint("attempt", 0),
		zap.Error(rpctypes.ErrGRPCLeaseNotFound))
	lg.Warn("error occurred during lease keep alive loop", zap.Error(rpctypes.ErrGRPCLeaseNotFound))
	// What is not expected.
	lg.With(zap.String("endpoint", "127.0.0.1:2379")).Warn("lease keepalive response queue is full; dropping response send", zap.Int("queue-size", 16))
	lg.Error("failed to refresh token", zap.Error(rpctypes.ErrGRPCAuthFailed))

	type rec struct {
		Level, Msg, Endpoint string
		QueueSize            float64 `json:"queue-size"`
	}
	var got []rec
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []rec{
		{Level: "DEBUG", Msg: "retrying of unary invoker failed"},
		{Level: "DEBUG", Msg: "error occurred during lease keep alive loop"},
		{Level: "WARN", Msg: "lease keepalive response queue is full; dropping response send", Endpoint: "127.0.0.1:2379", QueueSize: 16},
		{Level: "ERROR", Msg: "failed to refresh token"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	// At the default INFO level the expected records are not written.
	out.Reset()
	lg = etcd.ClientLogger(slog.New(slog.NewTextHandler(&out, nil)))
	lg.Warn("retrying of unary invoker failed", zap.Error(rpctypes.ErrGRPCLeaseNotFound))
	if out.Len() != 0 {
		t.Errorf("an expected record was written at INFO: %s", out.String())
	}
}
