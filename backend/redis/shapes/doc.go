// Package shapes holds the tests of the Redis backend on the topologies and
// failures users run into: Redis Cluster with a slot migration, Sentinel
// failover with and without WAIT, restarts, network faults through a TCP
// proxy, SCRIPT FLUSH, TLS with a least-privilege ACL user, and hostile
// input and state. Every test starts real redis-server processes on
// 127.0.0.1 (see internal/redistest); it has no exported API.
//
// Run: go test -race ./backend/redis/shapes/ (and the fuzz target with
// go test -run '^$' -fuzz FuzzRedisKeys -fuzztime 10s ./backend/redis/shapes/).
package shapes
