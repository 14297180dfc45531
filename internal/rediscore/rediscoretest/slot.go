package rediscoretest

import (
	"fmt"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// SameSlotKeys returns n keys starting with prefix whose lock keys (with
// the backend's keyPrefix) share one Redis Cluster hash slot, as a set of
// keys on Cluster must (conformance.SetKeyer). The lock key's hash tag is
// the escaped key, so they are found by trying: about 16384 tries a key.
func SameSlotKeys(keyPrefix, prefix string, n int) []string {
	slot := func(k string) uint16 { return rediscore.HashSlot(redisscript.LockKey(keyPrefix, k)) }
	keys := []string{prefix + "0"}
	for i := 1; len(keys) < n && i < 1<<24; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); slot(k) == slot(keys[0]) {
			keys = append(keys, k)
		}
	}
	return keys
}
