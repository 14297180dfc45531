// Package fencedlock provides distributed locks that stay correct when a
// holder is paused past its lease.
//
// A [Locker] grants a [Lease] on a named key from a [driver.Backend] (Redis in
// package backend/redis, etcd in backend/etcd, an in-memory store in
// backend/memory). Every lease carries:
//
//   - a TTL on the server, so a crashed holder's lock expires;
//   - a watchdog (a timer in the Locker, not a goroutine per lease; a
//     backend that keeps leases alive itself, as etcd's keepalive does, may
//     run its own) that renews it every
//     Options.RenewInterval (TTL/3 by default) and reports loss through
//     [Lease.Context] and [Lease.Done] before the server could give the key
//     to anyone else (the local deadline is computed from the monotonic time
//     taken before each request, minus a safety margin);
//   - a random 128-bit owner token, so Release deletes the key only if this
//     holder still owns it;
//   - a fencing token ([Lease.Fence]) strictly greater than every token
//     granted before on the key. Pass it to the guarded resource, which
//     rejects writes older than one it has accepted (package fencing). A
//     paused holder that resumes cannot overwrite newer state.
//
// A lock alone cannot stop a paused holder's late write; the fence can.
// Users swap Redis for etcd by changing one constructor: everything else is
// written against [Locker] and [Lease].
//
// Errors are values checked with [errors.Is]: [ErrNotAcquired] (held by
// another owner; a cancelled wait is also ctx.Err(); a grant that came
// back too late also [ErrLateGrant]), [ErrLeaseLost], [ErrReleased],
// [ErrNotHeld], [ErrClosed], [ErrInvalid] and [ErrPermanent] (the store
// refuses for a reason no retry can fix).
//
// # Suspend
//
// The server's TTL runs on while the holder's machine is suspended; Go's
// monotonic clock, which the local deadline is measured on, may not. On
// Linux it is CLOCK_MONOTONIC, which stops during a suspend, so the
// Locker also keeps each deadline on CLOCK_BOOTTIME, which counts the
// suspended time: after a suspend longer than a lease's remaining time,
// [Lease.Err] reports it lost at once, and a grant whose reply spanned a
// suspend is refused as late. Go's timers stop too, so the watchdog
// (and [Lease.Done]) ends such a lease at its first tick after the
// resume, which comes when the next renewal falls due (or, for a lease
// renewed by hand, at its deadline as Go's clock counts it), unless Err
// or [Lease.Deadline] saw it first. Err and a grant's hand-out read
// CLOCK_BOOTTIME only when the wall clock moved against Go's monotonic
// clock (a suspend moves it); the watchdog reads it at every tick, so a
// suspend hidden from them by a wall-clock step back of the same length
// is still seen at the next tick, which ends the lease unrenewed.
//
// Elsewhere no clock that counts suspended time is read, and the local
// deadline is only as good as Go's monotonic clock. Go's time package
// says that on some systems the monotonic clock stops while the computer
// sleeps; on macOS it does (golang/go#66870, "macOS monotonic time paused
// during sleep": Go's runtime reads mach_absolute_time there, which does
// not advance during sleep). A proposal to use CLOCK_BOOTTIME for Go's
// own clock on Linux (golang/go#24595) was not adopted: Go 1.26's runtime
// still reads CLOCK_MONOTONIC. On Windows and the BSDs this package
// makes no claim. Where the clock stops, a lease can look held after a
// sleep longer than its remaining time: the fence still rejects the
// holder's late writes.
//
// A Locker is not reentrant: the [Lease] is the handle to a held key, so
// code that needs the key while holding it is given the Lease (or the
// context [Locker.Do] passed it), not a second acquire. A TryAcquire of a
// key the Locker holds, and an Acquire or Do on a context that comes from
// the lease holding the key (a nested Do), fail at once with an error
// wrapping [ErrHeldByLocker] and [ErrNotAcquired]; once the lease has
// ended the key can be taken again. Goroutines that share a Locker and
// Acquire one key on contexts of their own take turns, as any contenders.
//
// The caller who creates a [driver.Backend] closes it, after the Lockers on it:
// [Locker.Close] releases the Locker's leases and leaves the Backend open.
//
// Backends implement the driver contract, in package driver ([driver.Backend],
// [driver.Grant], the optional [driver.Notifier], [driver.WaitAcquirer],
// [driver.KeepAliver] and [driver.Inspector]). It is kept apart from this
// package, as database/sql/driver is from database/sql, so that this
// documentation lists what a user calls: the [Locker], its [Lease] and
// [Options], the errors and the limits. The errors a backend returns, the
// limits and [ValidateKey] are defined in package driver and re-exported
// here as the same values ([ErrNotHeld] == driver.ErrNotHeld, [HeldError]
// is an alias): errors.Is and errors.As give the same answer whichever
// package names them. To write a backend, implement [driver.Backend] (and
// any optional interface that fits) and run the conformance suite in
// package conformance against it.
package fencedlock
