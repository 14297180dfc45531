//go:build unix

package main

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// TestEtcdClientLog: the etcd client's records go through the command's
// log (its output, its --log-format), the expected ones (a failed attempt
// whose error the caller gets; a revoke of a lease that expired during a
// pause) are not printed, and what remains keeps its level.
func TestEtcdClientLog(t *testing.T) {
	for _, format := range []string{logText, logJSON} {
		var out strings.Builder
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(&out)
		var lf string
		logFormatFlag(fs, &lf)
		if err := fs.Parse([]string{"--log-format", format}); err != nil {
			t.Fatal(err)
		}
		lg := etcdLogger(fs)
		// What the client logged after a pause (retry_interceptor.go).
		lg.Warn("retrying of unary invoker failed",
			zap.String("target", "etcd-endpoints://0xc0/127.0.0.1:2379"),
			zap.String("method", "/etcdserverpb.Lease/LeaseRevoke"),
			zap.Uint("attempt", 0),
			zap.Error(rpctypes.ErrGRPCLeaseNotFound))
		lg.Warn("error occurred during lease keep alive loop", zap.Error(rpctypes.ErrGRPCLeaseNotFound))
		lg.Debug("retrying of unary invoker", zap.String("method", "/etcdserverpb.KV/Range"))
		// What is not expected.
		lg.Warn("lease keepalive response queue is full; dropping response send", zap.Int("queue-size", 16))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines, want the one unexpected record:\n%s", format, len(lines), out.String())
		}
		if format == logText {
			if want := "fencedlock run: etcd client: lease keepalive response queue is full; dropping response send queue-size=16"; lines[0] != want {
				t.Errorf("text: %q, want %q", lines[0], want)
			}
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec["level"] != "WARN" || rec["cmd"] != "run" || rec["component"] != "etcd client" || rec["queue-size"] != float64(16) {
			t.Errorf("json: %s (%v)", lines[0], err)
		}
	}
	// A config made without flags (tests) logs nothing.
	etcdLogger(nil).Warn("x")
}
