package main

// scripts is the table of generated scripts. Add an entry and a template
// to add a script.
var scripts = []Script{
	{
		Name:    "acquire",
		Summary: "Take the lock for an owner and grant the next fence, in one step.",
		Keys: []Param{
			{"lock key", "the lock; holds the owner token while held, always with a TTL"},
			{"fence key", "the fence counter; never expires, never deleted (same hash slot as KEYS[1])"},
			{"abandoned key", "the set of SHA-1s of owners whose acquire was cleaned up by release (lock key .. \"" + consts.AbandonedSuffix + "\"; same hash slot)"},
			{"queue key", "the fair queue (lock key .. \"" + consts.QueueSuffix + "\"; see wait.lua). While it exists, the lock is not taken, even if free: its waiters come first"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the lease in milliseconds"},
		},
		Returns: []string{
			"error " + consts.AbandonedCode + ": the owner's acquire was already cleaned up (this",
			"       request arrived late); nothing was changed",
			"n > 0: acquired; n is the fence granted (for an owner that already",
			"       holds the lock: its fence again, and the lease is set to ttl)",
			"n <= 0: held by another owner, who has -n milliseconds left; 0 also: free, but",
			"       waiters are queued in KEYS[4] (the caller queues behind them: wait.lua)",
			"error " + consts.CorruptCode + ": a key holds a value fencedlock did not write",
			"       (or a fence counter has a TTL); nothing was changed",
			"error " + consts.ExhaustedCode + ": the lock is free and its fence counter is at",
			"       " + consts.MaxFence + " (2^53), the greatest fence Lua grants exactly; nothing was changed",
		},
	},
	{
		Name:    "renew",
		Summary: "Extend the lease if, and only if, the owner still holds the lock.",
		Keys: []Param{
			{"lock key", "the lock"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the new lease in milliseconds"},
		},
		Returns: []string{
			"1: renewed to ttl; 0: not held by owner, nothing changed",
		},
	},
	{
		Name:    "release",
		Summary: "Delete the lock if, and only if, the owner holds it, and wake waiters; or hand it to the first live waiter of the fair queue.",
		Keys: []Param{
			{"lock key", "the lock; waiters listen on the channel KEYS[1] .. \"" + consts.ReleasedSuffix + "\""},
			{"queue key", "optional, with KEYS[3]: the fair queue (lock key .. \"" + consts.QueueSuffix + "\"; see wait.lua). When given, the lock goes to its first live waiter instead of being deleted"},
			{"fence key", "with KEYS[2]: the fence counter (lock key .. \":fence\")"},
			{"abandoned key", "optional, with ARGV[3]: the set of abandoned owners (lock key .. \"" + consts.AbandonedSuffix + "\"); last, so that a plain release does not send it"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"sharded", "optional: \"sharded\" publishes with SPUBLISH (Redis Cluster, Redis >= 7: only the key's shard); anything else, or absent: PUBLISH"},
			{"abandon", "optional, with KEYS[4]: milliseconds, or empty or absent for none. The release cleans up after an acquire (or a wait) whose outcome is unknown: the owner is also added to KEYS[4], kept at least that long, so that its acquire or wait refuses to run if it arrives later, and its entries in KEYS[2] are removed"},
		},
		Returns: []string{
			"1: released (deleted and \"released\" published, or handed to the first live",
			"   waiter of KEYS[2]: its owner token set with its TTL, the fence counter",
			"   incremented and \"" + consts.GrantedPrefix + "<SHA-1 of its owner> <fence>\" published);",
			"0: not held by owner, nothing deleted",
			"Without KEYS[2] the fence counter is not touched.",
		},
		Usage: "redis-cli --eval internal/redisscript/release.lua lock-key , token",
	},
	{
		Name:    "wait",
		Summary: "Take the lock if it is free and no live waiter is ahead, else join (or stay in) the fair queue.",
		Keys: []Param{
			{"lock key", "the lock"},
			{"fence key", "the fence counter (same hash slot as KEYS[1])"},
			{"abandoned key", "the set of abandoned owners (lock key .. \"" + consts.AbandonedSuffix + "\"; same hash slot)"},
			{"queue key", "the fair queue (lock key .. \"" + consts.QueueSuffix + "\"; same hash slot): a list of entries \"<expiry ms>:<ttl ms>:<owner>\" in arrival order, the expiry in server time; it expires with its last entry"},
		},
		Args: []Param{
			{"owner", "the owner token (a secret)"},
			{"ttl", "the lease in milliseconds, applied when the lock is granted (here or by release.lua's hand-off)"},
			{"entry ttl", "milliseconds the owner's queue entry stays valid; the waiter runs the script again before then to keep its place"},
			{"new", "optional: \"new\" when the owner has no entry in the queue for sure (its first request of this wait): then, if the lock is held, the entry is appended without reading the queue; anything else, or absent: the queue is searched for the owner's entry"},
		},
		Returns: []string{
			"error " + consts.AbandonedCode + ": the owner's wait was already cleaned up; nothing was changed",
			"n > 0: the owner holds the lock with fence n (taken now, or handed to it by a",
			"       release; the lease is set to ttl)",
			"{counter, pttl}: queued (entry added, or its expiry pushed back); counter is",
			"       the fence counter now (0 if none): a hand-off to this owner after this",
			"       step grants a greater fence. pttl > 0: the holder has pttl milliseconds left",
			"error " + consts.CorruptCode + " or " + consts.ExhaustedCode + ": as acquire.lua; nothing was changed",
		},
	},
	{
		Name:    "inspect",
		Summary: "Read the state of a lock without changing it.",
		Keys: []Param{
			{"lock key", "the lock"},
			{"fence key", "the fence counter (same hash slot as KEYS[1])"},
		},
		Returns: []string{
			"{owner or nil, PTTL of the lock key, fence counter or nil}",
			"The caller must not reveal the owner token.",
		},
	},
	{
		Name:    "retire",
		Summary: "Delete the fence counter of a lock name that is not held, and return its last fence.",
		Keys: []Param{
			{"lock key", "the lock"},
			{"fence key", "the fence counter to delete (same hash slot as KEYS[1])"},
		},
		Returns: []string{
			"n > 0: the counter was deleted; n was the last fence granted",
			"0: there was no counter (or one at 0, now deleted)",
			"n < 0: the lock is held, with -n milliseconds left; nothing changed",
			"error " + consts.CorruptCode + ": a key holds a value fencedlock did not write;",
			"       nothing was changed",
			"Only for names no process uses any more: see the package documentation.",
		},
		Usage: "redis-cli --eval internal/redisscript/retire.lua 'fencedlock:{orders}' 'fencedlock:{orders}:fence'",
	},
	{
		Name:    "fenced_write",
		Summary: "Write fields of a hash if, and only if, the fencing rule accepts the token.",
		Keys: []Param{
			{"hash", "the guarded resource: a hash holding the caller's fields and the fence record (fields fencedlock:fence and fencedlock:holder)"},
		},
		Args: []Param{
			{"token", "the fencing token presented: a uint64 in decimal, 1 to 18446744073709551615, no sign, no leading zero"},
			{"holder", "the holder id presented (non-empty; never the owner token)"},
			{"field", "the first field to set (not a reserved field)"},
			{"value", "its value; further field, value pairs may follow"},
		},
		Returns: []string{
			"{1}: accepted; the fields, the token and the holder id were written",
			"{0, fence, holder}: rejected (token older than fence, or equal to it from",
			"       another holder); nothing was written",
			"error " + consts.CorruptCode + ": the fence record was not written by fencedlock;",
			"       nothing was written (WRONGTYPE if KEYS[1] is not a hash)",
		},
		Usage: "redis-cli --eval internal/redisscript/fenced_write.lua orders , 42 holder-id value 7",
	},
	{
		Name:    "fenced_update",
		Summary: "Write the value of a guarded hash if the fencing rule accepts the token and the value read before is still there.",
		Keys: []Param{
			{"hash", "the guarded resource (see fenced_write.lua); its value is in field value"},
		},
		Args: []Param{
			{"token", "the fencing token presented: a uint64 in decimal, 1 to 18446744073709551615, no sign, no leading zero"},
			{"holder", "the holder id presented (non-empty; never the owner token)"},
			{"had", "1 if the caller read a value, 0 if it read none"},
			{"was", "the value the caller read (empty when had is 0)"},
			{"value", "the value to write"},
		},
		Returns: []string{
			"{1}: accepted; the value, the token and the holder id were written",
			"{0, fence, holder}: rejected (token older than fence, or equal to it from",
			"       another holder); nothing was written",
			"{2}: the value is no longer the one read (another write came between);",
			"       nothing was written",
			"error " + consts.CorruptCode + ": the fence record was not written by fencedlock;",
			"       nothing was written (WRONGTYPE if KEYS[1] is not a hash)",
		},
		Usage: "redis-cli --eval <(go run ./internal/luagen -print fenced_update) orders , 42 holder-id 1 6 7",
	},
	{
		Name:    "force_release",
		Summary: "Delete a lock whoever holds it and advance its fence counter, in one step (an operator's forced release).",
		Keys: []Param{
			{"lock key", "the lock"},
			{"fence key", "the fence counter (same hash slot as KEYS[1])"},
		},
		Returns: []string{
			"{owner or nil, PTTL of the lock key before, fence counter before (\"0\" if none), fence after}",
			"The fence after is consumed: granted to no one, so every later grant is greater.",
			"The caller must not reveal the owner token.",
			"error " + consts.CorruptCode + ": a key holds a value fencedlock did not write; nothing changed",
			"error " + consts.ExhaustedCode + ": the counter is at " + consts.MaxFence + "; nothing changed",
		},
		Usage: "redis-cli --eval internal/redisscript/force_release.lua 'fencedlock:{orders}' 'fencedlock:{orders}:fence'",
	},
	{
		Name:    "fence_barrier",
		Summary: "Raise the fence record of a guarded hash to a token, without writing any other field, if the fencing rule accepts it.",
		Keys: []Param{
			{"hash", "the guarded resource (see fenced_write.lua)"},
		},
		Args: []Param{
			{"token", "the fencing token: a uint64 in decimal, 1 to 18446744073709551615"},
			{"holder", "the holder id recorded with it (non-empty; never an owner token)"},
		},
		Returns: []string{
			"{1}: the fence record now holds token and holder",
			"{0, fence, holder}: rejected (token older than fence, or equal from another holder)",
			"error " + consts.CorruptCode + ": the fence record was not written by fencedlock; nothing written",
		},
		Usage: "redis-cli --eval <(go run ./internal/luagen -print fence_barrier) orders , 43 operator-holder-id",
	},
	{
		Name:    "proclaim",
		Summary: "Store the leader's value of an election's term if, and only if, the lease of that fence and holder id still holds the lock, and wake its watchers.",
		Keys: []Param{
			{"lock key", "the lock (the election's key); watchers listen on the channel KEYS[1] .. \"" + consts.ReleasedSuffix + "\""},
			{"fence key", "the fence counter (same hash slot as KEYS[1]): while the lock is held, the holder's fence"},
			{"leader key", "the leader record (lock key .. \"" + consts.LeaderSuffix + "\"; same hash slot): a hash of fence, holder, value and owner (the SHA-1 of the owner token, in hex); it has no TTL and outlives its term"},
		},
		Args: []Param{
			{"fence", "the term's fence, in decimal"},
			{"holder", "the holder id of the term's owner: the first 8 bytes of SHA-256 of its owner token, in hex (driver.HolderID; never the token)"},
			{"value", "the leader's value"},
			{"sharded", "optional: \"sharded\" publishes with SPUBLISH; anything else, or absent: PUBLISH"},
		},
		Returns: []string{
			"1: stored, and \"" + consts.Proclaimed + "<fence>\" published on the channel",
			"0: the lock is not held by the lease of that fence and holder id; nothing changed",
		},
	},
	{
		Name:    "leader",
		Summary: "Read an election's lock, fence counter and leader record at once, without changing them.",
		Keys: []Param{
			{"lock key", "the lock"},
			{"fence key", "the fence counter (same hash slot as KEYS[1])"},
			{"leader key", "the leader record (see proclaim.lua)"},
		},
		Returns: []string{
			"{PTTL of the lock key, fence counter or nil, record fence or nil, record holder or nil, record value or nil}",
			"       the record's fields are nil if the lock is held by an owner other than the record's",
			"A term is live when the PTTL is positive and the record's fence is the counter (the holder's fence).",
		},
	},
}
