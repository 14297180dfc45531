package redisscript

import _ "embed"

// The scripts of an operator's forced release (see the backends'
// ForceRelease and FenceBarrier).
var (
	//go:embed force_release.lua
	ForceReleaseLua string
	//go:embed fence_barrier.lua
	FenceBarrierLua string
)

// SHA-1 digests of the forced-release scripts, in hex.
var (
	ForceReleaseSHA = sha1hex(ForceReleaseLua) // of ForceReleaseLua
	FenceBarrierSHA = sha1hex(FenceBarrierLua) // of FenceBarrierLua
)
