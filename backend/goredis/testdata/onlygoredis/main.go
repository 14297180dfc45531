// Command onlygoredis imports only the root package and backend/goredis,
// as a go-redis service would; TestDepsNoRueidisNoEtcd lists what it
// compiles.
package main

import (
	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/goredis"
)

var (
	_ *fencedlock.Locker
	_ *goredis.Backend
)

func main() {}
