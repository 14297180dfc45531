package multilocktest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/multilock"
)

// OddNamesAndMaxKeys: any bytes may appear in a key (the set's encoding
// and each backend's key names), a set of MaxKeys keys is taken,
// renewed and released whole, and so is a set whose encoded name is as
// long as a key may be (driver.MaxKeyLen): each key is then held, as a
// single-key lease sees it, and free after the release.
func OddNamesAndMaxKeys(t *testing.T, s Setup) {
	b := s.New(t)
	m, single := newLocker(t, b), newSingle(t, s.New(t))
	sum := sha256.Sum256([]byte(t.Name()))
	p := hex.EncodeToString(sum[:3]) // short and unique to the test: 64 keys must fit in one name
	many := make([]string, multilock.MaxKeys)
	for i := range many {
		many[i] = fmt.Sprintf("%s%02d", p, i)
	}
	// The longest set: "multi:" + "n:" + key fills driver.MaxKeyLen.
	long := p + strings.Repeat("x", 1024-len("multi:")-len("1018:")-len(p))
	for name, set := range map[string][]string{
		"odd bytes": {p + "1:a,1:b", p + "{x}", p + "%2F/..", p + "\x00\xff", p + "é*?[", p + " "},
		"MaxKeys":   many,
		"longest":   {long},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ls, err := m.TryAcquire(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			held(t, b, true, set...)
			for _, k := range []string{set[0], set[len(set)-1]} {
				if _, err := single.TryAcquire(ctx, k); err == nil {
					t.Errorf("single TryAcquire of %q in a held set succeeded", k)
				}
			}
			if err := ls.Renew(ctx); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			held(t, b, false, set...)
		})
	}
}
