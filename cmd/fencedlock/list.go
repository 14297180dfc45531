//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

const listHeader = `Usage: fencedlock list [flags] [PREFIX]

List the locks whose name starts with PREFIX (all of them without it): held
or free, the holder id, the remaining lease, and the last fence granted.
Read-write locks (run --read/--write) are listed too, one row per reader or
writer (HELD is its mode: read or write), marked "(read-write lock)" after
the key, with the number of writers waiting. Nothing is changed on the
server.

It is built to be safe on a production server with millions of keys:
  Redis: SCAN (never KEYS) with MATCH on the lock keys, fence counters and
         read-write lock keys under the key prefix, --count keys examined per call, --pace between
         calls, on every node of a Cluster; each lock found is then inspected
         (one script call).
  etcd:  ranges of at most --count keys under <prefix>locks/, then under
         <prefix>rwlocks/, keys only, --pace between them; a free lock leaves
         no key on etcd, so only held and waited-for locks are listed (fence 0
         once free).
  PostgreSQL: pages of --count keys (an index range scan of both tables, in
         byte order), --pace between them; every key ever granted is listed,
         held or free, with its last fence (it holds no read-write locks).
It stops after --max locks (saying so on standard error and exiting 1) or
--timeout. A lock that changes while the listing runs is shown as it was
when it was inspected.
`

const listFooter = backendPointer + `
Examples:
  fencedlock list --redis redis://localhost:6379 nightly/
  FENCEDLOCK_ETCD=http://127.0.0.1:2379 fencedlock list --json | jq 'select(.held)'

JSON output (--json): one object per lock and line, as "fencedlock inspect --json" prints:
  {"key":"nightly/report","held":true,"holder":"3f2a9c0e1b7d4a65","ttl_ms":8123,"fence":42}
and for a read-write lock, the "rwlock" object of "fencedlock inspect --json":
  {"key":"cfg","kind":"rwlock","held":true,"mode":"write","writer":{"holder":"26c48e30c6b3be23","fence":3,"ttl_ms":29790},"fence":3}

` + listExitCodes

const listExitCodes = `Exit codes:
  0        the listing is complete (it may be empty)
  1        the listing stopped at --max locks or --timeout: it is incomplete
  64       usage error (bad flag or prefix)
  69       backend error (cannot reach or use the server)
`

// listFlags bound and pace a listing.
type listFlags struct {
	count   int64
	pace    time.Duration
	max     int
	timeout time.Duration
}

func (e *env) list(ctx context.Context, args []string) int {
	var (
		cfg     backendConfig
		f       listFlags
		jsonOut bool
	)
	fs := e.newFlagSet("list", listHeader, listFooter)
	addBackendFlags(fs, &cfg)
	fs.BoolVar(&jsonOut, "json", false, "print one JSON object per lock and line")
	fs.Int64Var(&f.count, "count", 1000, "keys examined per SCAN call (its COUNT) or per etcd range")
	fs.DurationVar(&f.pace, "pace", 2*time.Millisecond, "pause between two SCAN calls or ranges, so the server serves others in between")
	fs.IntVar(&f.max, "max", 10000, "stop after this many locks")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "stop after this long")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 1 {
		return e.usageError("list", "want at most one PREFIX, got %d arguments", fs.NArg())
	}
	prefix := fs.Arg(0)
	if len(prefix) > driver.MaxKeyLen {
		return e.usageError("list", "PREFIX is longer than a key can be (%d bytes)", driver.MaxKeyLen)
	}
	if f.count < 1 || f.count > 100000 || f.max < 1 || f.pace < 0 || f.timeout <= 0 {
		return e.usageError("list", "--count must be in [1, 100000], --max at least 1, --pace not negative and --timeout positive")
	}
	if err := cfg.resolve(e.getenv); err != nil {
		return e.usageError("list", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	sink := &listSink{f: f, p: &listPrinter{w: e.stdout, json: jsonOut}}
	var err error
	if cfg.redisURL != "" {
		var (
			client rueidis.Client
			b      *redisb.Backend
		)
		if client, b, err = dialRedis(cfg); err != nil {
			return e.openError("list", err)
		}
		defer func() { _ = b.Close(); client.Close() }()
		sink.in, sink.rw = b, b
		err = listRedis(ctx, client, b, prefix, sink)
	} else if cfg.postgresURL != "" {
		b, closeBackend, oerr := e.open(ctx, cfg)
		if oerr != nil {
			return e.openError("list", oerr)
		}
		defer closeBackend()
		err = listPostgres(ctx, b, prefix, sink)
	} else {
		octx, ocancel := openContext(ctx)
		client, b, derr := dialEtcd(octx, cfg)
		ocancel()
		if derr != nil {
			return e.openError("list", derr)
		}
		defer func() { _ = b.Close(); client.Close() }()
		sink.in, sink.rw = b, b
		err = listEtcd(ctx, client, b, prefix, sink)
	}
	switch {
	case err == errListMax:
		fmt.Fprintf(e.stderr, "fencedlock list: stopped after --max %d locks: the listing is incomplete\n", f.max)
		return exitFailure
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(e.stderr, "fencedlock list: stopped after --timeout %v with %d locks listed: the listing is incomplete (%s)\n", f.timeout, sink.n, errText(err))
		return exitFailure
	case err != nil:
		fmt.Fprintf(e.stderr, "fencedlock list: %s\n(check that the server at %s is reachable and the credentials are right)\n", errText(err), cfg.describe())
		return exitBackend
	}
	return exitOK
}

// pause waits d between two pages of a listing, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var errListMax = fmt.Errorf("fencedlock list: --max reached")

// listPrinter prints locks and read-write locks as a table or as JSON
// lines.
type listPrinter struct {
	w      io.Writer
	json   bool
	header bool
}

// listRow is one row of list's table.
type listRow struct {
	held, holder, ttl string
	fence             uint64
	key, note         string // note: after the key, in parentheses, if not ""
}

func (p *listPrinter) print(o inspectOutput) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(o)
	}
	r := listRow{held: "no", holder: "-", ttl: "-", fence: o.Fence, key: o.Key}
	if o.Held {
		r.held, r.holder, r.ttl = "yes", o.Holder, human.Duration(time.Duration(o.TTLms)*time.Millisecond).String()
		if r.holder == "" {
			r.holder = "?"
		}
	}
	return p.rows(r)
}

// printRW prints the read-write lock o: one JSON line, or a row per lease.
func (p *listPrinter) printRW(o rwOutput) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(o)
	}
	return p.rows(listRWRows(o)...)
}

func (p *listPrinter) rows(rows ...listRow) error {
	if !p.header {
		fmt.Fprintf(p.w, "%-5s %-16s %10s %8s  %s\n", "HELD", "HOLDER", "TTL", "FENCE", "KEY")
		p.header = true
	}
	for _, r := range rows {
		note := ""
		if r.note != "" {
			note = " (" + r.note + ")"
		}
		if _, err := fmt.Fprintf(p.w, "%-5s %-16s %10s %8d  %q%s\n", r.held, r.holder, r.ttl, r.fence, r.key, note); err != nil {
			return err
		}
	}
	return nil
}

// listed is a name found by a listing: a lock's, or a read-write lock's.
type listed struct {
	name string
	rw   bool
}

// listSink inspects what a listing found and prints it, counting up to
// --max.
type listSink struct {
	f  listFlags
	n  int
	in driver.Inspector
	rw driver.RWInspector // nil: the backend describes no read-write lock
	p  *listPrinter
}

// inspect inspects names (sorted by name, a lock before the read-write
// lock of the same name) and prints each; errListMax once s.n reaches
// --max. A read-write lock the backend no longer remembers is skipped.
func (s *listSink) inspect(ctx context.Context, names []listed) error {
	sort.Slice(names, func(i, j int) bool {
		if names[i].name != names[j].name {
			return names[i].name < names[j].name
		}
		return !names[i].rw && names[j].rw
	})
	for _, l := range names {
		if s.n >= s.f.max {
			return errListMax
		}
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		err := s.one(ictx, l)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// one inspects and prints l.
func (s *listSink) one(ctx context.Context, l listed) error {
	if l.rw {
		if s.rw == nil {
			return nil
		}
		info, err := s.rw.InspectRW(ctx, l.name)
		if err != nil {
			return err
		}
		o := newRWOutput(l.name, info)
		if !o.exists() {
			return nil
		}
		s.n++
		return s.p.printRW(o)
	}
	info, err := s.in.Inspect(ctx, l.name)
	if err != nil {
		return err
	}
	s.n++
	return s.p.print(lockOutput(l.name, info))
}

// lockOutput is inspect's output of the lock key as info describes it.
func lockOutput(key string, info driver.Info) inspectOutput {
	o := inspectOutput{Key: key, Held: info.Held, Fence: uint64(info.Fence)}
	if info.Held {
		o.Holder, o.TTLms = info.Holder, info.TTL.Milliseconds()
	}
	return o
}

// listRedis scans every node for the keys of the locks (lock key, fence
// counter) and read-write locks (writer, readers, counter, intents) of
// names starting with prefix, page by page, and inspects the names found.
func listRedis(ctx context.Context, client rueidis.Client, b *redisb.Backend, prefix string, sink *listSink) error {
	kp := b.Options().KeyPrefix
	// Escaped names: "{" and "}" never appear unescaped inside one, so the
	// lock key is the one ending in "}", its counter the one ending in
	// "}:fence", and a read-write lock's keys end in "}:rw:..."; other keys
	// (channels, abandoned sets, readers' fences) are ignored.
	lockPrefix := strings.TrimSuffix(b.LockKey(prefix+"x"), "x}")
	match := redisnames.GlobEscape(lockPrefix) + "*"
	seen := make(map[listed]bool)
	nodes := client.Nodes()
	for _, addr := range slices.Sorted(maps.Keys(nodes)) {
		node := nodes[addr]
		var cursor uint64
		for first := true; first || cursor != 0; first = false {
			if !first {
				if err := pause(ctx, sink.f.pace); err != nil {
					return err
				}
			}
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(sink.f.count).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("redis: scan %s: %w", addr, err)
			}
			cursor = e.Cursor
			var names []listed
			for _, k := range e.Elements {
				k, rw := cutRWSuffix(k)
				if !rw {
					k = strings.TrimSuffix(k, redisnames.FenceSuffix)
				}
				esc, ok := strings.CutSuffix(k, "}")
				if !ok {
					continue
				}
				esc, ok = strings.CutPrefix(esc, kp+"{")
				if !ok || strings.ContainsAny(esc, "{}") {
					continue
				}
				names = addName(names, esc, rw, prefix, seen)
			}
			if err := sink.inspect(ctx, names); err != nil {
				return err
			}
		}
	}
	return nil
}

// addName appends to names the lock (or, if rw, read-write lock) name that
// esc escapes (as in the backend's keys) if it starts with prefix and was
// not seen yet.
func addName(names []listed, esc string, rw bool, prefix string, seen map[listed]bool) []listed {
	name, err := url.PathUnescape(esc)
	l := listed{name: name, rw: rw}
	if err != nil || !strings.HasPrefix(name, prefix) || seen[l] {
		return names
	}
	seen[l] = true
	return append(names, l)
}

// listEtcd ranges over <prefix>locks/<escaped PREFIX>, keys only, a page at
// a time, and inspects each lock directory found; then over
// <prefix>rwlocks/<escaped PREFIX> for the read-write locks.
func listEtcd(ctx context.Context, client *clientv3.Client, b *etcdb.Backend, prefix string, sink *listSink) error {
	for _, dir := range []listed{{name: "locks/"}, {name: "rwlocks/", rw: true}} {
		base := b.Options().KeyPrefix + dir.name
		start := base + url.PathEscape(prefix)
		end := clientv3.GetPrefixRangeEnd(start)
		seen := make(map[listed]bool)
		for first := true; ; first = false {
			if !first {
				if err := pause(ctx, sink.f.pace); err != nil {
					return err
				}
			}
			resp, err := client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(sink.f.count),
				clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return fmt.Errorf("etcd: range %q: %w", start, err)
			}
			var names []listed
			for _, kv := range resp.Kvs {
				rest := strings.TrimPrefix(string(kv.Key), base)
				if esc, _, ok := strings.Cut(rest, "/"); ok {
					names = addName(names, esc, dir.rw, prefix, seen)
				}
			}
			if err := sink.inspect(ctx, names); err != nil {
				return err
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return nil
}
