package bench

import (
	"fmt"
	"testing"

	"github.com/fencedlock/fencedlock/internal/pgbench"
)

// BenchmarkPostgres compares fencedlock's PostgreSQL backend with
// pg_advisory_lock, the unfenced floor, on one PostgreSQL server started
// by internal/testserver, in one run: acquire+release at concurrency 1 and
// 64 (each goroutine its own key; ops/s is the total), then contended
// hand-offs of one key among 8 workers, each blocking in its own way
// (fencedlock's Locker polling with backoff, the Locker woken by
// LISTEN/NOTIFY, the Locker on Fair's FIFO queue woken by NOTIFY,
// pg_advisory_lock queued by the server, cirello.io/pglock retrying after
// a lease duration). Fair's polling waiters are left
// out: a hand-off waits for the head's next poll (611 ms per acquisition
// in one run of 500), which would make each pass minutes long. Every row reports
// the statements and round trips per operation (a pgx tracer on the pool).
// The rows compared run next to each other, in reverse order in odd
// passes (-pass, as the report's passes: see passOrder); at concurrency 1
// a paired row also interleaves the two operation by operation (vs-base:
// pg_advisory_lock's time over fencedlock's, see pgbench.Paired). The bodies are
// internal/pgbench's, shared with backend/postgres's own benchmarks;
// cirello.io/pglock's rows are pglock_test.go's.
func BenchmarkPostgres(b *testing.B) {
	e := pgbench.Start(b)
	type row struct {
		name string
		run  func(b *testing.B)
	}
	for _, par := range []int{1, 64} {
		for _, r := range passOrder([]row{
			{"fencedlock", func(b *testing.B) { pgbench.Run(b, e, par, pgbench.FencedlockCycle) }},
			{"fencedlock-fair", func(b *testing.B) { pgbench.Run(b, e, par, pgbench.FairCycle) }},
			{"pg_advisory_lock", func(b *testing.B) { pgbench.Run(b, e, par, pgbench.AdvisoryCycle) }},
			{"cirello.io/pglock", func(b *testing.B) { pgbench.Run(b, e, par, pglockCycle) }},
		}, *flagPass) {
			b.Run(fmt.Sprintf("AcquireRelease/conc=%d/%s", par, r.name), r.run)
		}
	}
	b.Run("AcquireRelease/conc=1/paired", func(b *testing.B) {
		pgbench.Paired(b, e, pgbench.FencedlockCycle, pgbench.AdvisoryCycle)
	})
	for _, r := range passOrder([]row{
		{"fencedlock-polling", func(b *testing.B) { pgbench.Contended(b, e, 8, pgbench.PollingWorker) }},
		{"fencedlock-listen", func(b *testing.B) { pgbench.Contended(b, e, 8, pgbench.ListeningWorker) }},
		{"fencedlock-fair-listen", func(b *testing.B) { pgbench.Contended(b, e, 8, pgbench.FairListeningWorker) }},
		{"pg_advisory_lock", func(b *testing.B) { pgbench.Contended(b, e, 8, pgbench.AdvisoryWorker) }},
		{"cirello.io/pglock", func(b *testing.B) { pgbench.Contended(b, e, 8, pglockWorker) }},
	}, *flagPass) {
		b.Run("Contended/workers=8/"+r.name, r.run)
	}
}
