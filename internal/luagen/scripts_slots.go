package main

// The semaphore's slot script (driver.SlotAcquirer), appended to the table.
func init() {
	scripts = append(scripts, Script{
		Name:    "slot_acquire",
		Summary: "Take the first free of several locks (a semaphore's slots) for an owner and grant that lock's next fence, in one step.",
		Keys: []Param{
			{"lock key", "the first slot's lock, as KEYS[1] of acquire.lua"},
			{"fence key", "its fence counter, as KEYS[2] of acquire.lua"},
			{"abandoned key", "its set of abandoned owners, as KEYS[3] of acquire.lua"},
			{"queue key", "only with ARGV[3] \"fair\": its fair queue, as KEYS[4] of acquire.lua; then the same three (four, fair) keys of each further slot, in the order the slots are tried"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the lease in milliseconds"},
			{"fair", "\"fair\": four keys per slot, and a free slot whose fair queue exists is not taken (its waiters come first); anything else: three keys per slot, queues are not read"},
		},
		Returns: []string{
			"{i, n}, i >= 0: slot i (0-based, in KEYS order) acquired with fence n (an",
			"       owner that already holds a slot: that slot, its fence again, the lease",
			"       set to ttl); no other slot is touched",
			"{-1, m}: every slot held by another owner, the first to expire in m",
			"       milliseconds (m = 0: a free slot was left to its queued waiters)",
			"error " + consts.AbandonedCode + ": the owner's acquire was cleaned up on the slot it",
			"       would take (this request arrived late); nothing was changed",
			"error " + consts.CorruptCode + " or " + consts.ExhaustedCode + ": as acquire.lua, for the slot it",
			"       would take; nothing was changed",
		},
	})
}
