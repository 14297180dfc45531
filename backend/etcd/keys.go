package etcd

// Key naming: every key the backend writes lies under Options.KeyPrefix,
// lock queues under "locks/", fence records of guarded resources under
// "fences/", leader records of elections under "elections/" (election.go).

import (
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// lockDir is the directory of key's queue, ending in "/".
func (b *Backend) lockDir(key string) string {
	return b.opts.KeyPrefix + "locks/" + url.PathEscape(key) + "/"
}

// entry is the etcd key of a place in key's queue held on lease: the lease
// ID in 16 hex digits. A lease carries at most one key at a time (see
// pool.go), so the name is unique while it exists, and a pooled lease
// reuses the names it had: etcd's index keeps every key name created
// under a directory until compaction, and each read of the queue visits
// them all, so one new name per acquisition (a name per owner) made every
// acquire of a busy lock slower until the next compaction.
func (b *Backend) entry(key string, lease clientv3.LeaseID) string {
	return entryIn(b.lockDir(key), lease)
}

// entryIn is the entry of lease in the queue directory dir (lockDir), built
// in one allocation.
func entryIn(dir string, lease clientv3.LeaseID) string {
	const hexDigits = "0123456789abcdef"
	var sb strings.Builder
	sb.Grow(len(dir) + 16)
	sb.WriteString(dir)
	for shift := 60; shift >= 0; shift -= 4 {
		sb.WriteByte(hexDigits[uint64(lease)>>shift&0xf])
	}
	return sb.String()
}

// firstCreate reads the first entry of a queue directory: built once, as
// clientv3.WithFirstCreate builds its options anew (four allocations) at
// each call. The options only set fields of the Op they apply to.
var firstCreate = clientv3.WithFirstCreate()

// queueKeys reads the names (and create revisions) of a queue directory's
// entries, without their values: built once, like firstCreate.
var queueKeys = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}

// fenceKey is the etcd key holding the fence record of a guarded resource.
func (b *Backend) fenceKey(resource string) string {
	return b.opts.KeyPrefix + "fences/" + url.PathEscape(resource)
}
