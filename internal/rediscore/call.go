package rediscore

import (
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/redisnames"
	"github.com/fencedlock/fencedlock/internal/redisscript"
)

// MaxArgv is the length of [Call.Argv]: the longest script command,
// "EVALSHA sha numkeys" and 4 keys and 4 arguments.
const MaxArgv = 11

// Call is one script command of the lock path: its KEYS and ARGV, with the
// memory they live in, so that an Acquire allocates one Call and nothing
// else of its own (the key names are written into buf, the arguments are
// the caller's strings). The Call of an Acquire becomes its Grant's Data,
// and the lease's Renew and Release use it again while no other call
// does (see reuse): then they allocate nothing of their own.
type Call struct {
	Keys []string // the script's KEYS
	Args []string // the script's ARGV

	// Argv is scratch space for an adapter whose client takes a command
	// as []any (go-redis): it fills Argv with the command and pointers to
	// Keys and Args (a *string boxes into an any without allocating), so
	// that the command costs no allocation beyond the Call.
	Argv [MaxArgv]any

	core  *Backend  // the backend that made the names: its KeyPrefix
	key   string    // the lock's name
	names [4]string // lock, fence, abandoned, queue: slices of one string in buf
	keys  [4]string // Keys' memory
	args  [4]string // Args' memory
	busy  atomic.Bool
	buf   [256]byte
}

// String returns the lock key: a Grant prints its Data, and a Call holds
// no secret while it is one (see done).
func (c *Call) String() string { return c.names[0] }

// GoString is String, so that %#v of a Grant prints no field of the Call.
func (c *Call) GoString() string { return c.names[0] }

// newCall returns a Call with the names of the lock key of b.
func (b *Backend) newCall(key string) *Call {
	c := &Call{core: b, key: key}
	p, esc := b.opts.KeyPrefix, redisscript.Escape(key)
	all := concat(c.buf[:], p, "{", esc, "}", redisnames.FenceSuffix,
		p, "{", esc, "}", redisnames.AbandonedSuffix,
		p, "{", esc, "}", redisnames.QueueSuffix)
	n := len(p) + len(esc) + 2 // the lock key: LockKey(key)
	f := n + len(redisnames.FenceSuffix)
	a := f + n + len(redisnames.AbandonedSuffix)
	c.names = [4]string{all[:n], all[:f], all[f:a], all[a:]}
	return c
}

// callFor returns a Call for a command on g's lock: g's Data if this
// backend made it for g.Key and no other call uses it, else a new one (a
// Grant of Key and Owner only, as the Locker's clean-up sends, one of
// another backend, or a Call in use). Pass it to done.
func (b *Backend) callFor(g *driver.Grant) *Call {
	if c, ok := g.Data.(*Call); ok && c.core == b && c.key == g.Key && c.busy.CompareAndSwap(false, true) {
		return c
	}
	c := b.newCall(g.Key)
	c.busy.Store(true)
	return c
}

// done ends the use of c by a command that returned err: after a reply
// (err nil) the client holds nothing of c, which may then be used again;
// after an error the client may still hold it (a command given up on when
// its context ended), so c stays busy for good. The arguments (the owner
// token) are cleared: Data holds no secret.
func (c *Call) done(err error) {
	if err == nil {
		c.args = [4]string{}
		c.busy.Store(false)
	}
}

// concat returns the concatenation of parts. If it fits in buf it is
// written there and the string shares buf's memory (no allocation): buf
// must not be written again while the string is in use, and the value
// holding buf stays alive as long as the string does. Otherwise it
// allocates.
func concat(buf []byte, parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > len(buf) || n == 0 {
		return strings.Join(parts, "")
	}
	b := buf[:0]
	for _, p := range parts {
		b = append(b, p...)
	}
	return unsafe.String(unsafe.SliceData(b), n)
}
