package rediscoretest

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/internal/redisnames"
)

// Records is conformance.RecordLister on a standalone redis-server, for
// the harnesses of both clients: every key named after the lock key
// lockKey (a SCAN of the names that begin with it: the lock, its queue,
// its abandoned owners, a read-write lock's keys...) but its fence
// counters, each with whether it has a TTL.
func Records(ctx context.Context, c rueidis.Client, lockKey string) ([]conformance.Record, error) {
	fences := map[string]bool{lockKey + redisnames.FenceSuffix: true, lockKey + redisnames.RWFenceSuffix: true}
	match := redisnames.GlobEscape(lockKey) + "*"
	var recs []conformance.Record
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		for _, k := range e.Elements {
			if fences[k] {
				continue
			}
			pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				return nil, err
			}
			if pttl == -2 {
				continue // gone since the SCAN
			}
			recs = append(recs, conformance.Record{Name: k, Expires: pttl >= 0})
		}
		if e.Cursor == 0 {
			return recs, nil
		}
		cursor = e.Cursor
	}
}
