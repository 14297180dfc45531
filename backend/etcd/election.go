package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// Elections: a term is a lock on the election's key (its queue under
// "locks/"), its fence the create revision of the queue head. The leader's
// value lives in a record of its own under "elections/", not on the
// holder's lease (which the backend pools and reuses for later grants):
// "<fence> <holder id>\n<value>". It outlives its term, and is reported
// only while the queue head carries its fence.

var _ driver.Elector = (*Backend)(nil)

// electionKey is the etcd key of key's leader record.
func (b *Backend) electionKey(key string) string {
	return b.opts.KeyPrefix + "elections/" + url.PathEscape(key)
}

func leaderRecord(fence fencing.Token, holder string, value []byte) string {
	return fenceRecord(fence, holder) + "\n" + string(value)
}

func parseLeaderRecord(v []byte) (fencing.Token, string, []byte, error) {
	head, value, ok := bytes.Cut(v, []byte{'\n'})
	if !ok {
		return 0, "", nil, fmt.Errorf("etcd: malformed leader record %q: %w", v, driver.ErrPermanent)
	}
	fence, holder, err := parseFenceRecord(head)
	if err != nil {
		return 0, "", nil, fmt.Errorf("%w: %w", err, driver.ErrPermanent)
	}
	return fence, holder, value, nil
}

// Proclaim implements [driver.Elector]: a Txn puts the leader record only
// if the queue head that carries fence (its create revision) still exists;
// the head's value is its holder id.
func (b *Backend) Proclaim(ctx context.Context, key string, fence fencing.Token, holder string, value []byte) error {
	ctx, cancel, err := b.enterKey(ctx, "proclaim", key)
	if err != nil {
		return err
	}
	defer b.leave(ctx, cancel)
	resp, err := b.c.Get(ctx, b.lockDir(key), firstCreate...)
	if err != nil {
		return b.ctxErr(ctx, errorf("proclaim %q: %w", key, err))
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != int64(fence) || string(resp.Kvs[0].Value) != holder {
		return errorf("proclaim %q: %w", key, driver.ErrNotHeld)
	}
	head := string(resp.Kvs[0].Key)
	tr, err := b.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(head), "=", int64(fence))).
		Then(clientv3.OpPut(b.electionKey(key), leaderRecord(fence, holder, value))).
		Commit()
	if err != nil {
		return b.ctxErr(ctx, errorf("proclaim %q: %w", key, err))
	}
	if !tr.Succeeded {
		return errorf("proclaim %q: %w", key, driver.ErrNotHeld)
	}
	return nil
}

// Leader implements [driver.Elector]. TTL is an upper bound of the term's
// remaining lease, in whole seconds as etcd reports it (see Inspect).
func (b *Backend) Leader(ctx context.Context, key string) (driver.LeaderInfo, error) {
	ctx, cancel, err := b.enterKey(ctx, "leader", key)
	if err != nil {
		return driver.LeaderInfo{}, err
	}
	defer b.leave(ctx, cancel)
	info, lease, _, err := b.readLeader(ctx, key)
	if err != nil || !info.Held {
		return info, err
	}
	tr, err := b.c.TimeToLive(ctx, lease)
	if err != nil {
		return driver.LeaderInfo{}, b.ctxErr(ctx, errorf("leader %q: %w", key, err))
	}
	if info.TTL = remaining(tr); info.TTL == 0 {
		return driver.LeaderInfo{}, nil // the lease expired after the read
	}
	return info, nil
}

// readLeader reads key's queue head and leader record at one revision and
// returns the term, the head's lease and the revision. A malformed leader
// record (one Proclaim did not write) is an error wrapping
// driver.ErrPermanent, returned with the revision read.
func (b *Backend) readLeader(ctx context.Context, key string) (driver.LeaderInfo, clientv3.LeaseID, int64, error) {
	resp, err := b.c.Txn(ctx).Then(clientv3.OpGet(b.lockDir(key), firstCreate...), clientv3.OpGet(b.electionKey(key))).Commit()
	if err != nil {
		return driver.LeaderInfo{}, 0, 0, b.ctxErr(ctx, errorf("leader %q: %w", key, err))
	}
	rev := resp.Header.Revision
	heads := resp.Responses[0].GetResponseRange().GetKvs()
	recs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(recs) == 0 {
		return driver.LeaderInfo{}, 0, rev, nil
	}
	fence, holder, value, err := parseLeaderRecord(recs[0].Value)
	if err != nil {
		return driver.LeaderInfo{}, 0, rev, errorf("leader %q: %w", key, err)
	}
	if len(heads) == 0 || heads[0].CreateRevision != int64(fence) {
		return driver.LeaderInfo{Fence: fence}, 0, rev, nil // Fence: the newest term begun, for WatchLeader
	}
	return driver.LeaderInfo{Held: true, Fence: fence, Holder: holder, Value: value}, clientv3.LeaseID(heads[0].Lease), rev, nil
}

// WatchLeader implements [driver.Elector] with two watches from the
// revision of the first read: the leader record (a term begins) and the
// queue's deletions with their previous create revision (a term ends).
// The two are not ordered with each other; a leaderView puts their events
// in the terms' order. Events carry no TTL. When a watch fails (a
// compacted revision, no leader), the state is read again and delivered
// with Missed. A leader record that Proclaim did not write (an
// operator's, another program's under the same KeyPrefix) vouches for no
// term: it is delivered as no leader, marked Missed, with a warning to
// the Logger (Leader returns an error wrapping driver.ErrPermanent), and
// the state is read again only when the record changes.
func (b *Backend) WatchLeader(ctx context.Context, key string) (<-chan driver.LeaderEvent, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, fmt.Errorf("etcd: watch leader: %w", err)
	}
	if err := b.begin(); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stopClose := context.AfterFunc(b.closeCtx, cancel)
	info, _, rev, err := b.readLeader(wctx, key)
	if err != nil {
		stopClose()
		cancel()
		b.wg.Done()
		return nil, nil, err
	}
	out := make(chan driver.LeaderEvent)
	done := make(chan struct{})
	go func() {
		defer b.wg.Done()
		defer close(done)
		defer close(out)
		defer stopClose()
		b.watchLeader(wctx, key, info, rev, out)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	return out, stop, nil
}

// watchLeader delivers key's terms from info, read at rev, until ctx ends.
func (b *Backend) watchLeader(ctx context.Context, key string, info driver.LeaderInfo, rev int64, out chan<- driver.LeaderEvent) {
	v := newLeaderView(info)
	first := driver.LeaderEvent{LeaderInfo: v.cur}
	for {
		if !sendEvents(ctx, out, []driver.LeaderEvent{first}) {
			return
		}
		b.followLeader(ctx, key, v, rev+1, out)
		var ok bool
		if info, rev, ok = b.rereadLeader(ctx, key, v, out); !ok {
			return
		}
		first = driver.LeaderEvent{LeaderInfo: v.reset(info), Missed: true}
	}
}

// rereadLeader reads key's state again after its watch failed, until a
// read succeeds (ok) or ctx ends. A failed read is tried again after
// 100ms. A malformed leader record fails every read until it is
// rewritten, and vouches for no term: it is delivered once as no leader,
// marked Missed, and read again only after the record changes (a watch
// of it), not polled.
func (b *Backend) rereadLeader(ctx context.Context, key string, v *leaderView, out chan<- driver.LeaderEvent) (driver.LeaderInfo, int64, bool) {
	reported := false
	for {
		select {
		case <-ctx.Done():
			return driver.LeaderInfo{}, 0, false
		case <-time.After(100 * time.Millisecond):
		}
		info, _, rev, err := b.readLeader(ctx, key)
		if err == nil {
			return info, rev, true
		}
		if !errors.Is(err, driver.ErrPermanent) {
			continue // no leader, a lost connection: read again
		}
		if !reported {
			b.opts.Logger.Warn("etcd: malformed leader record; the leader watch reports no leader until it is rewritten", "key", key, "err", err)
			if !sendEvents(ctx, out, []driver.LeaderEvent{{LeaderInfo: v.reset(driver.LeaderInfo{}), Missed: true}}) {
				return driver.LeaderInfo{}, 0, false
			}
			reported = true
		}
		b.awaitChange(ctx, b.electionKey(key), rev+1)
	}
}

// awaitChange waits until key is written or deleted at a revision >= rev,
// its watch fails, or ctx ends.
func (b *Backend) awaitChange(ctx context.Context, key string, rev int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range b.c.Watch(ctx, key, clientv3.WithRev(rev)) {
		if len(wr.Events) > 0 || wr.Err() != nil || wr.Canceled {
			return
		}
	}
}

// followLeader runs the two watches from rev until ctx ends or one fails.
func (b *Backend) followLeader(ctx context.Context, key string, v *leaderView, rev int64, out chan<- driver.LeaderEvent) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := b.c.Watch(ctx, b.electionKey(key), clientv3.WithRev(rev))
	queue := b.c.Watch(ctx, b.lockDir(key), clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithPrevKV(), clientv3.WithFilterPut())
	for {
		var evs []driver.LeaderEvent
		select {
		case <-ctx.Done():
			return
		case wr, ok := <-recs:
			if !ok || wr.Err() != nil || wr.Canceled {
				return
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				fence, holder, value, err := parseLeaderRecord(ev.Kv.Value)
				if err != nil {
					return // a malformed record: read again, which reports it
				}
				evs = append(evs, v.begin(driver.LeaderInfo{Held: true, Fence: fence, Holder: holder, Value: value})...)
			}
		case wr, ok := <-queue:
			if !ok || wr.Err() != nil || wr.Canceled {
				return
			}
			for _, ev := range wr.Events {
				if ev.PrevKv == nil {
					// The server could not read the previous key (compacted
					// before the event was sent): the entry that ended is
					// unknown, maybe the term's. Read the state again.
					v.doubt = true
					break
				}
				evs = append(evs, v.end(fencing.Token(ev.PrevKv.CreateRevision))...)
			}
		}
		if !sendEvents(ctx, out, evs) || v.doubt {
			return // v.doubt: as a failed watch, the state is read again
		}
	}
}

func sendEvents(ctx context.Context, out chan<- driver.LeaderEvent, evs []driver.LeaderEvent) bool {
	for _, ev := range evs {
		select {
		case out <- ev:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// maxEnded bounds the terms remembered as ended before their beginning
// was seen (leases granted and never proclaimed, and waiters that gave up,
// end there too). Past it the view is in doubt: a term whose end it could
// not remember would be reported current for good once it began, so the
// watch reads the state again instead (delivered with Missed).
const maxEnded = 1024

// leaderView is the state of an election as a watch has delivered it.
type leaderView struct {
	cur    driver.LeaderInfo
	newest fencing.Token          // the newest term begun (or read)
	ended  map[fencing.Token]bool // queue heads seen deleted, above newest
	doubt  bool                   // an end was not remembered (maxEnded): read the state again
}

func newLeaderView(info driver.LeaderInfo) *leaderView {
	v := &leaderView{}
	v.reset(info)
	return v
}

// reset starts again from a state read, and returns it.
func (v *leaderView) reset(info driver.LeaderInfo) driver.LeaderInfo {
	v.newest = max(v.newest, info.Fence)
	if !info.Held {
		info = driver.LeaderInfo{}
	}
	v.cur, v.ended, v.doubt = info, make(map[fencing.Token]bool), false
	return info
}

// begin is a leader record written for term t: the events it makes.
func (v *leaderView) begin(t driver.LeaderInfo) []driver.LeaderEvent {
	if t.Fence <= v.newest || v.doubt {
		return nil // a term already delivered (or ended before the watch), or the view in doubt
	}
	var evs []driver.LeaderEvent
	if v.cur.Held { // its end is still on the other watch: the lock is exclusive
		evs = append(evs, driver.LeaderEvent{})
	}
	v.newest, v.cur = t.Fence, t
	evs = append(evs, driver.LeaderEvent{LeaderInfo: t})
	if v.ended[t.Fence] {
		v.cur = driver.LeaderInfo{}
		evs = append(evs, driver.LeaderEvent{})
	}
	for f := range v.ended {
		if f <= t.Fence {
			delete(v.ended, f)
		}
	}
	return evs
}

// end is the deletion of the queue entry created at revision f.
func (v *leaderView) end(f fencing.Token) []driver.LeaderEvent {
	if v.cur.Held && v.cur.Fence == f {
		v.cur = driver.LeaderInfo{}
		return []driver.LeaderEvent{{}}
	}
	if f > v.newest {
		if len(v.ended) < maxEnded {
			v.ended[f] = true
		} else {
			v.doubt = true
		}
	}
	return nil
}
