package conformance

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// This file holds the properties of the optional [driver.RWLocker]: many
// readers or one writer per name, one fence counter shared by both modes,
// and writer preference (a refused writer's intent keeps new readers out).

// rwProperties are appended to the suite (see properties.go).
var rwProperties = []property{
	{"RWExclusion", "If the backend is an RWLocker: readers of a name share it, a writer is refused while a reader or a writer holds it and a reader while a writer does, renew and release are owner- and mode-checked, and of concurrent first attempts from several backends on a free name either one writer or only readers are granted.", testRWExclusion},
	{"RWFences", "If the backend is an RWLocker: the fences of successive grants of a name, readers and writers from several backends, ended by release or still held, are strictly increasing: a writer's fence is above every earlier reader's and writer's.", testRWFences},
	{"RWWriterPreference", "If the backend is an RWLocker: a writer refused by a reader with an intent keeps new readers out while the intent is live (readers cannot starve it), is granted once the readers left, and its grant and its release end the intent; a writer refused without an intent (Intent 0) keeps nobody out.", testRWWriterPreference},
}

func init() { properties = append(properties, rwProperties...) }

// rwLockers returns n new backends of e as RWLockers, or false (logged)
// if the backend is not one.
func (e *env) rwLockers(t *testing.T, n int) ([]driver.RWLocker, bool) {
	t.Helper()
	if !implements[driver.RWLocker](t, e) {
		return nil, false
	}
	rws := make([]driver.RWLocker, n)
	for i := range rws {
		rws[i] = e.backend(t).(driver.RWLocker)
	}
	return rws, true
}

// rwTry makes one AcquireRW of key in mode m for a fresh owner, with a long
// lease and the given intent.
func (e *env) rwTry(rw driver.RWLocker, key string, m driver.RWMode, intent time.Duration) (driver.Grant, error) {
	req := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}, Mode: m, Intent: intent}
	g, err := rw.AcquireRW(e.ctx, req)
	if err == nil && (g.Owner != req.Owner || g.Fence == 0) {
		err = errors.New("grant without the request's owner, or with fence 0")
	}
	return g, err
}

// rwGrant is rwTry that fails t unless it is granted.
func (e *env) rwGrant(t *testing.T, rw driver.RWLocker, key string, m driver.RWMode, why string) driver.Grant {
	t.Helper()
	g, err := e.rwTry(rw, key, m, 0)
	if err != nil {
		t.Fatalf("%s: %v AcquireRW(%s): %v", why, m, quote(key), err)
	}
	return g
}

// rwRefused fails t unless a m AcquireRW of key (with intent) is refused
// with ErrNotAcquired.
func (e *env) rwRefused(t *testing.T, rw driver.RWLocker, key string, m driver.RWMode, intent time.Duration, why string) {
	t.Helper()
	g, err := e.rwTry(rw, key, m, intent)
	if err == nil {
		_ = rw.ReleaseRW(e.ctx, g, m)
		t.Fatalf("%s: %v AcquireRW(%s) granted (fence %v), want ErrNotAcquired", why, m, quote(key), g.Fence)
	}
	if !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("%s: %v AcquireRW(%s): %v, want ErrNotAcquired", why, m, quote(key), err)
	}
}

// rwRelease fails t unless g's lease of mode m is released.
func (e *env) rwRelease(t *testing.T, rw driver.RWLocker, g driver.Grant, m driver.RWMode) {
	t.Helper()
	if err := rw.ReleaseRW(e.ctx, g, m); err != nil {
		t.Fatalf("%v ReleaseRW(%s) by the holder: %v", m, quote(g.Key), err)
	}
}

func testRWExclusion(t *testing.T, e *env) {
	rws, ok := e.rwLockers(t, 3)
	if !ok {
		return
	}
	key := e.key("rw-exclusion")
	r1 := e.rwGrant(t, rws[0], key, driver.Read, "a reader of a free name")
	e.rwRefused(t, rws[1], key, driver.Write, 0, "a writer while a reader holds")
	r2 := e.rwGrant(t, rws[1], key, driver.Read, "a second reader")
	if _, err := rws[2].RenewRW(e.ctx, r1, driver.Write, e.hold); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("RenewRW of a reader's grant as a writer: %v, want ErrNotHeld", err)
	}
	if _, err := rws[2].RenewRW(e.ctx, r1, driver.Read, e.hold); err != nil {
		t.Fatalf("RenewRW of a reader by its owner: %v", err)
	}
	e.rwRelease(t, rws[2], r1, driver.Read)
	e.rwRefused(t, rws[2], key, driver.Write, 0, "a writer while one reader is left")
	e.rwRelease(t, rws[0], r2, driver.Read)
	if err := rws[0].ReleaseRW(e.ctx, r2, driver.Read); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("a second ReleaseRW of a reader: %v, want ErrNotHeld", err)
	}
	w := e.rwGrant(t, rws[2], key, driver.Write, "a writer once the readers left")
	e.rwRefused(t, rws[0], key, driver.Read, 0, "a reader while a writer holds")
	e.rwRefused(t, rws[1], key, driver.Write, 0, "a writer while a writer holds")
	if err := rws[1].ReleaseRW(e.ctx, w, driver.Read); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ReleaseRW of a writer's grant as a reader: %v, want ErrNotHeld", err)
	}
	e.rwRelease(t, rws[1], w, driver.Write)
	e.rwRelease(t, rws[0], e.rwGrant(t, rws[0], key, driver.Read, "a reader once the writer left"), driver.Read)
	for round := range 10 {
		e.rwRace(t, rws, e.key("rw-race"), round)
	}
}

// rwRace makes concurrent first attempts of both modes on a free key and
// checks that the grants are one writer or only readers.
func (e *env) rwRace(t *testing.T, rws []driver.RWLocker, key string, round int) {
	t.Helper()
	type got struct {
		g driver.Grant
		m driver.RWMode
	}
	var (
		mu     sync.Mutex
		grants []got
		wg     sync.WaitGroup
	)
	for i := range 6 {
		m := driver.Read
		if (i+round)%3 == 0 {
			m = driver.Write
		}
		rw := rws[i%len(rws)]
		wg.Go(func() {
			if g, err := e.rwTry(rw, key, m, 0); err == nil {
				mu.Lock()
				grants = append(grants, got{g, m})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	writers := 0
	for _, g := range grants {
		if g.m == driver.Write {
			writers++
		}
		_ = rws[0].ReleaseRW(e.ctx, g.g, g.m)
	}
	if writers > 0 && len(grants) > 1 {
		t.Fatalf("concurrent attempts on %s granted %d leases, %d of them writers: a writer with another holder", quote(key), len(grants), writers)
	}
}

func testRWFences(t *testing.T, e *env) {
	rws, ok := e.rwLockers(t, 2)
	if !ok {
		return
	}
	key := e.key("rw-fences")
	var last fencing.Token
	next := func(g driver.Grant, what string) driver.Grant {
		t.Helper()
		if g.Fence <= last {
			t.Fatalf("%s of %s got fence %v, not above the fence %v granted before it", what, quote(key), g.Fence, last)
		}
		last = g.Fence
		return g
	}
	r1 := next(e.rwGrant(t, rws[0], key, driver.Read, "reader 1"), "reader 1")
	r2 := next(e.rwGrant(t, rws[1], key, driver.Read, "reader 2"), "reader 2")
	e.rwRelease(t, rws[0], r2, driver.Read)
	e.rwRelease(t, rws[1], r1, driver.Read)
	w := next(e.rwGrant(t, rws[1], key, driver.Write, "a writer after two readers"), "a writer after two readers")
	e.rwRelease(t, rws[0], w, driver.Write)
	for i := range 3 {
		r := next(e.rwGrant(t, rws[i%2], key, driver.Read, "a reader after a writer"), "a reader after a writer")
		if i < 2 {
			e.rwRelease(t, rws[0], r, driver.Read)
		} else {
			defer e.rwRelease(t, rws[0], r, driver.Read)
		}
	}
	// A writer refused by the held reader draws no fence: the next grant,
	// once it left, is still above every grant before.
	e.rwRefused(t, rws[1], key, driver.Write, 0, "a writer while a reader holds")
}

func testRWWriterPreference(t *testing.T, e *env) {
	rws, ok := e.rwLockers(t, 3)
	if !ok {
		return
	}
	intent := max(e.hold, 5*time.Second) // outlives the check: it ends by the writer's grant
	key := e.key("rw-preference")
	r := e.rwGrant(t, rws[0], key, driver.Read, "a reader of a free name")
	e.rwRefused(t, rws[1], key, driver.Write, 0, "a writer without intent while a reader holds")
	e.rwRelease(t, rws[2], e.rwGrant(t, rws[2], key, driver.Read, "a reader after a writer without intent"), driver.Read)

	wreq := driver.RWRequest{AcquireRequest: driver.AcquireRequest{Key: key, Owner: owner(), TTL: e.hold}, Mode: driver.Write, Intent: intent}
	if _, err := rws[1].AcquireRW(e.ctx, wreq); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	for i := range 3 { // bounded: every new reader is refused while the writer waits
		e.rwRefused(t, rws[i%3], key, driver.Read, 0, "a new reader while a writer waits (writer starvation)")
	}
	if _, err := rws[2].RenewRW(e.ctx, r, driver.Read, e.hold); err != nil {
		t.Fatalf("the held reader's renewal while a writer waits: %v", err)
	}
	e.rwRelease(t, rws[0], r, driver.Read)
	w, err := rws[1].AcquireRW(e.ctx, wreq)
	if err != nil {
		t.Fatalf("the waiting writer once the readers left: %v", err)
	}
	e.rwRelease(t, rws[2], w, driver.Write)
	e.rwRelease(t, rws[0], e.rwGrant(t, rws[0], key, driver.Read, "a reader after the writer's grant and release (its intent must be gone)"), driver.Read)

	// A writer that gives up: its release (of Key and Owner only, as the
	// Locker's clean-up) ends its intent.
	r = e.rwGrant(t, rws[0], key, driver.Read, "a reader")
	wreq.Owner = owner()
	if _, err := rws[1].AcquireRW(e.ctx, wreq); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	e.rwRefused(t, rws[2], key, driver.Read, 0, "a new reader while a writer waits")
	if err := rws[1].ReleaseRW(e.ctx, driver.Grant{Key: key, Owner: wreq.Owner}, driver.Write); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the clean-up release of a writer that was never granted: %v, want ErrNotHeld", err)
	}
	e.rwRelease(t, rws[2], e.rwGrant(t, rws[2], key, driver.Read, "a reader after the waiting writer gave up (its intent must be gone)"), driver.Read)
	e.rwRelease(t, rws[0], r, driver.Read)
}
