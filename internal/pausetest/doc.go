// Package pausetest holds the multi-process test of the seed scenario: a
// lock holder stopped with SIGSTOP in the middle of its critical section,
// past its lease, resumes and tries to write. Real OS processes (the test
// binary re-executed as workers) contend for one key on a real
// redis-server through fencedlock and backend/redis and increment a
// counter guarded by fences; every acquire, read and write is recorded in
// a shared history (internal/history) that is checked at the end.
//
// With fencing (FencedSet) the check passes and the paused holder's write
// is rejected. The negative control runs the same workload with plain
// HSET writes and must fail the check (the paused holder's stale
// overwrite and the lost increments), which shows the test can fail.
//
// The package has no code of its own; run its tests with
//
//	go test -race ./internal/pausetest
package pausetest
