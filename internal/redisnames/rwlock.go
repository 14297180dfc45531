package redisnames

// The keys of a read-write lock (package rwlock), beside the plain lock of
// the same name (lock key .. suffix: the same hash slot), apart from it.
const (
	// RWWriterSuffix names the writer: a string holding its owner token,
	// with the writer's TTL.
	RWWriterSuffix = ":rw:writer"
	// RWReadersSuffix names the readers: a sorted set of owner tokens
	// scored by lease expiry (server time, ms).
	RWReadersSuffix = ":rw:readers"
	// RWFencesSuffix names the readers' fences: a hash of owner token to
	// fence.
	RWFencesSuffix = ":rw:fences"
	// RWFenceSuffix names the fence counter shared by readers and
	// writers; it never expires.
	RWFenceSuffix = ":rw:fence"
	// RWIntentsSuffix names the waiting writers' intents: a sorted set of
	// owner tokens scored by intent expiry (server time, ms).
	RWIntentsSuffix = ":rw:intents"
	// RWAbandonedSuffix names the set of owners (their SHA-1s) whose
	// AcquireRW was cleaned up, kept for redisscript.AbandonTTL: as
	// AbandonedSuffix for the plain lock.
	RWAbandonedSuffix = ":rw:abandoned"
)
