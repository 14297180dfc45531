package main

// The read-write lock's script (package rwlock), appended to the table.
func init() {
	scripts = append(scripts, Script{
		Name:    "rwlock",
		Summary: "Acquire, renew or release a read or write lease of a read-write lock, in one step.",
		Keys: []Param{
			{"writer key", "the writer: its owner token, with its TTL (lock key .. \":rw:writer\")"},
			{"readers key", "the readers: a sorted set of owner tokens scored by lease expiry in server milliseconds (same hash slot)"},
			{"fences key", "the readers' fences: a hash of owner token to fence (same hash slot)"},
			{"fence key", "the fence counter of readers and writers; never expires (same hash slot)"},
			{"intents key", "waiting writers' intents: a sorted set of owner tokens scored by expiry in server milliseconds (same hash slot)"},
			{"abandoned key", "the set of SHA-1s of owners whose acquire was cleaned up by a release with ARGV[8] (lock key .. \":rw:abandoned\"; same hash slot)"},
		},
		Args: []Param{
			{"op", "acquire, renew or release"},
			{"mode", "r (a shared read lease) or w (the exclusive write lease)"},
			{"owner", "the owner token (a secret)"},
			{"ttl", "the lease in milliseconds (acquire, renew)"},
			{"intent", "acquire of a writer: milliseconds its intent is kept when refused, 0 for none"},
			{"channel", "release: the channel to publish \"released\" on (the lock key's release channel)"},
			{"sharded", "release: \"sharded\" publishes with SPUBLISH; anything else: PUBLISH"},
			{"abandon", "release: milliseconds, or empty for none: a clean-up after an acquire whose outcome is unknown; the owner is added to KEYS[6], kept at least that long, so that its acquire takes nothing if it arrives later"},
		},
		Returns: []string{
			"acquire: n > 0: granted with fence n (the owner's own lease again for a",
			"       retried request); n <= 0: refused, -n milliseconds is how long at most",
			"       until the conflicting lease or intent ends",
			"renew, release: 1 done; 0: the owner holds no lease of that mode, nothing changed",
			"error " + consts.CorruptCode + " or " + consts.ExhaustedCode + ": as acquire.lua; nothing was granted",
			"error " + consts.AbandonedCode + ": acquire: the owner's acquire was cleaned up before it arrived; nothing was changed",
		},
	})
}

// The read-write lock's inspection (driver.RWInspector), read only.
func init() {
	scripts = append(scripts, Script{
		Name:    "rwinspect",
		Summary: "Read the state of a read-write lock without changing it.",
		Keys: []Param{
			{"writer key", "the writer (lock key .. \":rw:writer\")"},
			{"readers key", "the readers: a sorted set of owner tokens scored by lease expiry in server milliseconds (same hash slot)"},
			{"fences key", "the readers' fences: a hash of owner token to fence (same hash slot)"},
			{"fence key", "the fence counter of readers and writers (same hash slot)"},
			{"intents key", "waiting writers' intents: a sorted set of owner tokens scored by expiry in server milliseconds (same hash slot)"},
		},
		Returns: []string{
			"{writer or nil, PTTL of the writer key, fence counter or nil, live intents,",
			" then for each live reader: owner, remaining lease in ms, fence or nil}",
			"The caller must not reveal the owner tokens.",
		},
	})
}
