package main

// The scripts of sets of keys (package multilock, driver.MultiLocker):
// each takes, renews or releases every key of a set in one step.
func init() { scripts = append(scripts, multiScripts...) }

var multiScripts = []Script{
	{
		Name:    "multi_acquire",
		Summary: "Take every lock of a set for an owner, each with its next fence, or none, in one step.",
		Keys: []Param{
			{"lock keys", "KEYS[1..n]: the n locks of the set (n >= 1), as acquire.lua's KEYS[1]"},
			{"fence keys", "KEYS[n+1..2n]: their fence counters, in the same order (acquire.lua's KEYS[2])"},
			{"abandoned key", "KEYS[2n+1]: the set of SHA-1s of owners whose acquire of the set was cleaned up (KEYS[1] .. \"" + consts.AbandonedSuffix + "\")"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the lease in milliseconds, applied to every lock"},
		},
		Returns: []string{
			"{1, fence of KEYS[1], ..., fence of KEYS[n]}: every lock taken",
			"{0, i, pttl}: KEYS[i] is held by another owner for pttl more milliseconds; nothing was changed",
			"error " + consts.AbandonedCode + ": the owner's acquire was already cleaned up; nothing was changed",
			"error " + consts.CorruptCode + ": a key holds a value fencedlock did not write (another type, a lock without a TTL, a counter that is not one), named; nothing was changed",
			"error " + consts.ExhaustedCode + ": a fence counter is at " + consts.MaxFence + "; nothing was changed",
		},
	},
	{
		Name:    "multi_renew",
		Summary: "Extend the lease of every lock of a set if, and only if, the owner still holds them all.",
		Keys: []Param{
			{"lock keys", "KEYS[1..n]: the locks of the set"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the new lease in milliseconds"},
		},
		Returns: []string{
			"0: every lock renewed to ttl",
			"i > 0: KEYS[i] is the first lock not held by owner; nothing changed",
			"-i < 0: KEYS[i] is the first lock not held by owner, and it holds a value fencedlock did not write (another type, or a string without a TTL); nothing changed",
		},
	},
	{
		Name:    "multi_release",
		Summary: "Delete every lock of a set that the owner holds, and wake their waiters.",
		Keys: []Param{
			{"lock keys", "KEYS[1..n]: the locks of the set; waiters listen on KEYS[i] .. \"" + consts.ReleasedSuffix + "\""},
			{"abandoned key", "optional, with ARGV[3]: the abandoned set of KEYS[1] (see multi_acquire.lua)"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"sharded", "\"sharded\" publishes with SPUBLISH; anything else: PUBLISH"},
			{"abandon", "optional, with the abandoned key: milliseconds. A clean-up after an acquire whose outcome is unknown: the owner is added to the abandoned set, kept at least that long"},
		},
		Returns: []string{
			"0: every lock deleted",
			"i > 0: KEYS[i] is the first lock not held by owner; the locks it holds were deleted all the same",
			"-i < 0: as i, and KEYS[i] holds a value fencedlock did not write (another type, or a string without a TTL), left as it is",
		},
	},
}
