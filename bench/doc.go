// Package bench compares fencedlock with the Go lock libraries people use
// today, in one run on the same servers. It is a separate module so that
// the competitors never enter the library's dependency graph.
//
// Everything is in the _test.go files: one file per contender holding only
// its constructor, the scenarios in scenario_bench_test.go (Capacity, each
// library timed alone at concurrency 64, in capacity_test.go; PingPong, the
// bare pub/sub floor of a hand-off, in pingpong_test.go), and a smoke test
// that CI runs. Run the benchmarks with
//
//	go test -run '^$' -bench . -benchmem
//
// or produce the report (README.md and chart.svg) with
//
//	go run ./cmd/report
//
// By default the benchmark starts redis-server (from PATH) and a
// single-member etcd (in a child process of the test binary) on loopback
// ports. BENCH_REDIS_URL and BENCH_ETCD_ENDPOINTS point it at your own
// servers instead.
package bench
