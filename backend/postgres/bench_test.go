package postgres_test

import (
	"fmt"
	"testing"

	"github.com/fencedlock/fencedlock/internal/pgbench"
)

// BenchmarkAcquireRelease: one Acquire and one Release per op, on New and
// on Fair (whose acquire also reads the waiters' queue, in the same
// statement), against the unfenced floor on the same server,
// pg_advisory_lock and pg_advisory_unlock on one pooled connection (no
// fence, no lease), at parallelism 1 and 64 (a key per goroutine), then
// contended hand-offs of one key among 8 Lockers. Each row reports
// stmts/op and roundtrips/op. The bodies are internal/pgbench's, shared
// with the peer comparison in bench/ (BenchmarkPostgres, whose figures are
// in bench/README.md).
func BenchmarkAcquireRelease(b *testing.B) {
	e := pgbench.Start(b)
	for _, par := range []int{1, 64} {
		for _, r := range []struct {
			name  string
			setup pgbench.Setup
		}{{"fencedlock", pgbench.FencedlockCycle}, {"fencedlock-fair", pgbench.FairCycle}, {"pg_advisory_lock", pgbench.AdvisoryCycle}} {
			b.Run(fmt.Sprintf("%s/parallel=%d", r.name, par), func(b *testing.B) {
				pgbench.Run(b, e, par, r.setup)
			})
		}
	}
	b.Run("fencedlock/contended", func(b *testing.B) {
		pgbench.Contended(b, e, 8, pgbench.PollingWorker)
	})
}
