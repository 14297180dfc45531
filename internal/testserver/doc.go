// Package testserver starts the real servers that tests run against:
// redis-server (standalone, with replicas, as a Cluster, behind Sentinels,
// over TLS) and PostgreSQL. Each server listens on a free 127.0.0.1 port, in
// its own temporary directory, and is stopped when the test that started it
// ends (and killed with the test process if that dies first).
//
// Under go test -short no server is started: every starter calls SkipShort
// first, which skips the test with a message naming the server, so that
// `go test -short ./...` is a fast loop of unit and miniredis tests. That is
// the only skip: without -short a missing binary fails the test with
// instructions (Debian: apt-get install redis-server redis-tools
// postgresql-15; tools/ci-deps.sh installs them), it never skips.
//
// Redis servers are built from one piece: a Redis is one process with a
// config file made from base lines plus WithConfig lines, so replicas,
// sentinels and cluster nodes are Redis values too.
//
// PostgreSQL binaries are looked up in $PGTEST_BINDIR, then in
// /usr/lib/postgresql/{17,16,15}/bin, then on $PATH. PostgreSQL refuses to
// run as root, so when the test runs as root the server runs as the
// "postgres" OS user (its data directory is chowned to that user).
//
// It is imported by tests only; it is not part of the library's API.
package testserver

import "testing"

// SkipShort skips t when the tests run with -short, naming server (such as
// "redis-server") as the reason. Every starter of this package calls it
// before it starts anything, and so does any other test that starts a
// server or a long build of its own, so this is the one place that decides
// what -short leaves out.
func SkipShort(t testing.TB, server string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("testserver: -short: this test starts %s (run the tests without -short, as make test does, to include it)", server)
	}
}
