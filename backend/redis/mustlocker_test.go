package redis

import "github.com/fencedlock/fencedlock/internal/locktest"

// mustLocker returns fencedlock.New(b, opts), failing the test if New
// refuses the options (the shared helper; see internal/locktest).
var mustLocker = locktest.New
