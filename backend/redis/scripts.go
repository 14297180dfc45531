package redis

//go:generate go run ../../internal/luagen -dir scripts

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The generated scripts. See scripts/*.lua for their KEYS, ARGV and replies.
var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/retire.lua
	retireLua string
)

// Names shared with the scripts (internal/luagen consts).
const (
	fenceSuffix = ":fence"
	// abandonedSuffix names the set of owners whose Acquire was cleaned
	// up (luagen AbandonedSuffix): lock key .. abandonedSuffix.
	abandonedSuffix = ":abandoned"
	releasedSuffix  = ":released" // luagen ReleasedSuffix
	corruptCode     = "FENCEDLOCK_CORRUPT"
	exhaustedCode   = "FENCEDLOCK_EXHAUSTED"
	abandonedCode   = "FENCEDLOCK_ABANDONED"
)

// abandonTTL is how long the server remembers an owner whose Acquire was
// cleaned up, refusing its requests that arrive later. A request rueidis
// still holds is written or failed within its write timeout, far less.
const abandonTTL = 5 * time.Minute

var abandonTTLms = strconv.FormatInt(abandonTTL.Milliseconds(), 10)

// Prebuilt scripts: the SHA-1 is computed once; Exec sends EVALSHA and
// falls back to EVAL on NOSCRIPT.
var (
	acquireScript = rueidis.NewLuaScript(acquireLua)
	renewScript   = rueidis.NewLuaScript(renewLua)
	releaseScript = rueidis.NewLuaScript(releaseLua)
	inspectScript = rueidis.NewLuaScript(inspectLua)
	retireScript  = rueidis.NewLuaScript(retireLua)

	// acquireSHA is used when Acquire pipelines the script with WAIT.
	acquireSHA = sha1hex(acquireLua)
	// renewSHA is used when Renew pipelines the script with WAIT.
	renewSHA = sha1hex(renewLua)
)

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
