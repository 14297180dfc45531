package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkEtcdFloor: the uncontended acquire+release of
// BenchmarkAcquireRelease for the etcd contenders only, with what each cycle
// costs the etcd server, read from its Prometheus metrics before and after:
//
//   - proposals/op: Raft proposals committed (etcd_server_proposals_committed_total),
//     the floor of a lock on etcd: a put and a delete are two;
//   - fsyncs/op: WAL fsyncs (etcd_disk_wal_fsync_duration_seconds_count),
//     0 on the benchmark's own server, which runs with fsync off: point
//     BENCH_ETCD_ENDPOINTS at a server with fsync on to count them;
//   - server-cpu-us/op: the server process's CPU (process_cpu_seconds_total;
//     10 ms resolution, so read it over many operations).
//
// The counts include the untimed warm-up round (conc operations) and are
// divided by b.N+conc.
func BenchmarkEtcdFloor(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			forEach(b, func(c contender) bool { return c.server == "etcd" }, func(b *testing.B, e *env, c contender) {
				cl := c.open(b, e, clientConfig{ttl: benchTTL})
				defer cl.close()
				before, err := etcdServerMetrics(e)
				if err != nil {
					b.Fatalf("etcd metrics: %v", err)
				}
				runOps(b, e, c, conc, acquireReleaseOps(cl, "floor", c.name, conc))
				after, err := etcdServerMetrics(e)
				if err != nil {
					b.Fatalf("etcd metrics: %v", err)
				}
				ops := float64(b.N + conc)
				b.ReportMetric((after.proposals-before.proposals)/ops, "proposals/op")
				b.ReportMetric((after.fsyncs-before.fsyncs)/ops, "fsyncs/op")
				b.ReportMetric((after.cpu-before.cpu)*1e6/ops, "server-cpu-us/op")
			})
		})
	}
}

type etcdMetrics struct {
	proposals, fsyncs, cpu float64
	keepAlives             float64 // LeaseKeepAlive requests received (0 if the server does not count them)
}

// etcdServerMetrics reads the counters of BenchmarkEtcdFloor from the first
// endpoint's /metrics (etcd serves it on its client URL).
func etcdServerMetrics(e *env) (etcdMetrics, error) {
	var m etcdMetrics
	ep := e.etcdEPs[0]
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET %s/metrics: %s", ep, resp.Status)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		if strings.HasPrefix(name, "grpc_server_msg_received_total{") && strings.Contains(name, `grpc_method="LeaseKeepAlive"`) {
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				m.keepAlives += v
			}
			continue
		}
		switch name {
		case "etcd_server_proposals_committed_total":
			dst = &m.proposals
		case "etcd_disk_wal_fsync_duration_seconds_count":
			dst = &m.fsyncs
		case "process_cpu_seconds_total":
			dst = &m.cpu
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return m, fmt.Errorf("metric %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found < 3 {
		return m, fmt.Errorf("GET %s/metrics: %d of the 3 counters found", ep, found)
	}
	return m, nil
}

// BenchmarkEtcdHandoffFloor: the floor of a hand-off on etcd, with no lock
// library: one client deletes a key with a Txn (a release: one Raft
// proposal) and another, watching the prefix (as a waiter's backend does),
// receives the deletion event. ns/op is from sending the delete to
// receiving the event; the key is put back between operations, untimed.
// With a second writer beside it (writers=2: the releasing worker's
// re-enqueue, a put per hand-off, as in BenchmarkContended), the delete
// shares the server with one more proposal per operation.
func BenchmarkEtcdHandoffFloor(b *testing.B) {
	e := servers(b)
	for _, writers := range []int{1, 2} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			rel, w := e.newEtcd(b), e.newEtcd(b)
			defer rel.Close()
			defer w.Close()
			other := e.newEtcd(b)
			defer other.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prefix := fmt.Sprintf("/bench-handoff-floor/%d/%d/", writers, time.Now().UnixNano())
			k := prefix + "holder"
			wch := w.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
			if wr := <-wch; !wr.Created {
				b.Fatalf("watch not created: %v", wr.Err())
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if _, err := rel.Put(ctx, k, "v"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if writers == 2 {
					go func() { _, _ = other.Put(ctx, prefix+"waiter", "v") }()
				}
				resp, err := rel.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), ">", 0)).Then(clientv3.OpDelete(k)).Commit()
				if err != nil || !resp.Succeeded {
					b.Fatalf("delete: %v", err)
				}
				for got := false; !got; {
					wr, ok := <-wch
					if !ok {
						b.Fatal("watch ended")
					}
					for _, ev := range wr.Events {
						got = got || string(ev.Kv.Key) == k
					}
				}
			}
		})
	}
}
