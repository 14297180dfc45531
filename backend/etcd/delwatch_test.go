package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lease reused on the same lock puts its key under the same name, so the
// shared watch may dispatch the deletion of the previous key of that name
// (the previous holder's release) after the new holder subscribed: that
// deletion, at a revision before the one at which the new holder was known
// to hold the lock, must not be reported as the new key's loss. The bench's
// uncontended acquire+release (one lock, its lease pooled and reused) lost
// its lease this way in 3 of 14 runs of up to 6000 cycles: "lock key ...
// deleted at revision 8067".
func TestDeletionOfEarlierKeyOfSameName(t *testing.T) {
	b := &Backend{}
	s := &kaSlot{}
	// A running watch (no goroutine here): deletions from revision 1 on.
	w := &delWatch{b: b, running: true, from: 1, recent: map[string]int64{}, recentFrom: 1}
	const name = "fencedlock/locks/k/0000000000000001"
	del := func(rev int64) []*clientv3.Event {
		return []*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(name), ModRevision: rev}}}
	}
	k := &keeper{b: b, slot: s, idx: -1}
	sub := w.subscribe(k, name, 11) // created at 10, held at 10: from 11
	w.dispatch(del(9))              // the previous holder's key, released at 9
	if k.deleted != 0 {
		t.Errorf("a deletion at revision 9 (before the key held at 10) was reported as its loss (deleted = %d)", k.deleted)
	}
	w.dispatch(del(12))
	if k.deleted != 12 {
		t.Errorf("the deletion at revision 12 was not reported: deleted = %d, want 12", k.deleted)
	}
	w.unsubscribe(sub)
}
