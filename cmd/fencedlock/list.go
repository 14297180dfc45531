//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/fencedlock/fencedlock/cmd/fencedlock/internal/human"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdb "github.com/fencedlock/fencedlock/backend/etcd"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
	"github.com/fencedlock/fencedlock/driver"
)

const listHeader = `Usage: fencedlock list [flags] [PREFIX]

List the locks whose name starts with PREFIX (all of them without it): held
or free, the holder id, the remaining lease, and the last fence granted.
Nothing is changed on the server.

It is built to be safe on a production server with millions of keys:
  Redis: SCAN (never KEYS) with MATCH on the lock keys and fence counters
         under the key prefix, --count keys examined per call, --pace between
         calls, on every node of a Cluster; each lock found is then inspected
         (one script call).
  etcd:  ranges of at most --count keys under <prefix>locks/, keys only,
         --pace between them; a free lock leaves no key on etcd, so only held
         and waited-for locks are listed (fence 0 once free).
  PostgreSQL: pages of --count keys (an index range scan of both tables, in
         byte order), --pace between them; every key ever granted is listed,
         held or free, with its last fence.
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
	out := &listPrinter{w: e.stdout, json: jsonOut}
	var (
		n   int
		err error
	)
	if cfg.redisURL != "" {
		var (
			client rueidis.Client
			b      *redisb.Backend
		)
		if client, b, err = dialRedis(cfg); err != nil {
			return e.openError("list", err)
		}
		defer func() { _ = b.Close(); client.Close() }()
		n, err = listRedis(ctx, client, b, prefix, f, out.print)
	} else if cfg.postgresURL != "" {
		b, closeBackend, oerr := e.open(ctx, cfg)
		if oerr != nil {
			return e.openError("list", oerr)
		}
		defer closeBackend()
		n, err = listPostgres(ctx, b, prefix, f, out.print)
	} else {
		octx, ocancel := openContext(ctx)
		client, b, derr := dialEtcd(octx, cfg)
		ocancel()
		if derr != nil {
			return e.openError("list", derr)
		}
		defer func() { _ = b.Close(); client.Close() }()
		n, err = listEtcd(ctx, client, b, prefix, f, out.print)
	}
	switch {
	case err == errListMax:
		fmt.Fprintf(e.stderr, "fencedlock list: stopped after --max %d locks: the listing is incomplete\n", f.max)
		return exitFailure
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(e.stderr, "fencedlock list: stopped after --timeout %v with %d locks listed: the listing is incomplete (%s)\n", f.timeout, n, errText(err))
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

// listPrinter prints locks as a table or as JSON lines.
type listPrinter struct {
	w      io.Writer
	json   bool
	header bool
}

func (p *listPrinter) print(o inspectOutput) error {
	if p.json {
		return json.NewEncoder(p.w).Encode(o)
	}
	if !p.header {
		fmt.Fprintf(p.w, "%-5s %-16s %10s %8s  %s\n", "HELD", "HOLDER", "TTL", "FENCE", "KEY")
		p.header = true
	}
	held, holder, ttl := "no", "-", "-"
	if o.Held {
		held, holder, ttl = "yes", o.Holder, human.Duration(time.Duration(o.TTLms)*time.Millisecond).String()
		if holder == "" {
			holder = "?"
		}
	}
	_, err := fmt.Fprintf(p.w, "%-5s %-16s %10s %8d  %q\n", held, holder, ttl, o.Fence, o.Key)
	return err
}

// inspectLocks inspects names (sorted) and prints each; it returns how many
// it printed, errListMax once *n reaches f.max.
func inspectLocks(ctx context.Context, in driver.Inspector, names []string, n *int, f listFlags, print func(inspectOutput) error) error {
	sort.Strings(names)
	for _, name := range names {
		if *n >= f.max {
			return errListMax
		}
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		info, err := in.Inspect(ictx, name)
		cancel()
		if err != nil {
			return err
		}
		o := inspectOutput{Key: name, Held: info.Held, Fence: uint64(info.Fence)}
		if info.Held {
			o.Holder, o.TTLms = info.Holder, info.TTL.Milliseconds()
		}
		if err := print(o); err != nil {
			return err
		}
		*n++
	}
	return nil
}

// listRedis scans every node for the lock keys and fence counters of names
// starting with prefix, page by page, and inspects the names found.
func listRedis(ctx context.Context, client rueidis.Client, b *redisb.Backend, prefix string, f listFlags, print func(inspectOutput) error) (int, error) {
	kp := b.Options().KeyPrefix
	// Escaped names: "{" and "}" never appear unescaped inside one, so the
	// lock key is the one ending in "}" and the counter the one ending in
	// "}:fence"; other keys (channels, abandoned sets) are ignored.
	lockPrefix := strings.TrimSuffix(b.LockKey(prefix+"x"), "x}")
	match := globEscape(lockPrefix) + "*"
	seen := make(map[string]bool)
	n := 0
	nodes := client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		node := nodes[addr]
		var cursor uint64
		for first := true; first || cursor != 0; first = false {
			if !first {
				if err := pause(ctx, f.pace); err != nil {
					return n, err
				}
			}
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(f.count).Build()).AsScanEntry()
			if err != nil {
				return n, fmt.Errorf("redis: scan %s: %w", addr, err)
			}
			cursor = e.Cursor
			var names []string
			for _, k := range e.Elements {
				esc, ok := strings.CutSuffix(k, "}")
				if !ok {
					if esc, ok = strings.CutSuffix(k, "}:fence"); !ok {
						continue
					}
				}
				esc, ok = strings.CutPrefix(esc, kp+"{")
				if !ok || strings.ContainsAny(esc, "{}") {
					continue
				}
				names = addLockName(names, esc, prefix, seen)
			}
			if err := inspectLocks(ctx, b, names, &n, f, print); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// addLockName appends to names the lock name that esc escapes (as in the
// backend's keys) if it starts with prefix and was not seen yet.
func addLockName(names []string, esc, prefix string, seen map[string]bool) []string {
	name, err := url.PathUnescape(esc)
	if err != nil || !strings.HasPrefix(name, prefix) || seen[name] {
		return names
	}
	seen[name] = true
	return append(names, name)
}

// globEscape escapes the glob characters of SCAN MATCH.
func globEscape(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			sb.WriteByte('\\')
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// listEtcd ranges over <prefix>locks/<escaped PREFIX>, keys only, a page at
// a time, and inspects each lock directory found.
func listEtcd(ctx context.Context, client *clientv3.Client, b *etcdb.Backend, prefix string, f listFlags, print func(inspectOutput) error) (int, error) {
	base := b.Options().KeyPrefix + "locks/"
	start := base + url.PathEscape(prefix)
	end := clientv3.GetPrefixRangeEnd(start)
	seen := make(map[string]bool)
	n := 0
	for first := true; ; first = false {
		if !first {
			if err := pause(ctx, f.pace); err != nil {
				return n, err
			}
		}
		resp, err := client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(f.count),
			clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return n, fmt.Errorf("etcd: range %q: %w", start, err)
		}
		var names []string
		for _, kv := range resp.Kvs {
			rest := strings.TrimPrefix(string(kv.Key), base)
			if esc, _, ok := strings.Cut(rest, "/"); ok {
				names = addLockName(names, esc, prefix, seen)
			}
		}
		if err := inspectLocks(ctx, b, names, &n, f, print); err != nil {
			return n, err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
