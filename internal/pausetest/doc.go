// Package pausetest holds the multi-process test of the seed scenario: a
// lock holder stopped with SIGSTOP in the middle of its critical section,
// past its lease, resumes and tries to write. Real OS processes (the test
// binary re-executed as workers) contend for one key and increment a
// counter guarded by fences; every acquire, read and write is recorded in
// a shared history (internal/history) that is checked at the end. It runs
// on a real redis-server through backend/redis, the counter a hash
// (TestPausedHolder), and on a real PostgreSQL through backend/postgres,
// the counter a postgres.KV row (TestPausedHolderPostgres): the same
// workload and checks, only the store differs (store_test.go). The same
// workload with each round a term of one election (election.Campaign,
// Term.Resign) is the scenario for a leader (TestPausedLeader, on Redis):
// a leader stopped past its term resumes and its write is rejected.
//
// With fencing (FencedSet, KV.Set) the check passes and the paused
// holder's write is rejected. The negative control runs the same workload
// with unguarded writes (HSET, a plain upsert) and must fail the check
// (the paused holder's stale overwrite and the lost increments), which
// shows the test can fail.
//
// The package has no code of its own; run its tests with
//
//	go test -race ./internal/pausetest
package pausetest
