package fencing

import "context"

// Store is a key-value resource that applies the fencing rule ([Check]) to
// every write, atomically with the write: the guarded write of each backend
// behind one interface, so that a program written against a Store runs
// unchanged on Redis, etcd or the in-memory store of a unit test, changing
// only the constructor.
//
// Every key holds a value and a fence record (the highest token accepted
// for the key and the holder id that presented it). A write whose token the
// rule rejects writes nothing and returns an error wrapping a *[StaleError]
// (and so [ErrStale]). A zero token returns an error wrapping
// [ErrInvalidToken] and sends nothing. Implementations are safe for
// concurrent use.
type Store interface {
	// Get reads key's value and its fence record in one consistent read.
	// A key never written returns a Record with Found false, Fence 0.
	Get(ctx context.Context, key string) (Record, error)

	// Set writes value at key if the rule accepts token from holder; the
	// check, the value and the new fence record are one atomic step.
	Set(ctx context.Context, key, value string, token Token, holder string) error

	// Update is the script form, a read-modify-write under the fence: it
	// reads key, calls fn with what it read, and writes fn's result with
	// the fence rule applied and only if nothing wrote key in between, as
	// one atomic step on the store; when another write came between the
	// read and the write, it reads again and calls fn again (so fn must be
	// free of side effects). fn returning an error ends Update with that
	// error and writes nothing. A rejected token returns the *[StaleError]
	// before or instead of calling fn.
	Update(ctx context.Context, key string, token Token, holder string, fn func(cur Record) (string, error)) error
}
