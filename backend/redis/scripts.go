package redis

//go:generate go run ../../internal/luagen -dir scripts

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

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
	fenceSuffix    = ":fence"
	releasedSuffix = ":released" // luagen ReleasedSuffix
	corruptCode    = "FENCEDLOCK_CORRUPT"
	exhaustedCode  = "FENCEDLOCK_EXHAUSTED"
)

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
