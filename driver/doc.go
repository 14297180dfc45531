// Package driver is the contract between a fencedlock.Locker and a lock
// store: the interface a backend implements ([Backend], and the optional
// interfaces found by type assertion, such as [Notifier], [WaitAcquirer],
// [KeepAliver] and [Inspector]) and the values that cross it
// ([AcquireRequest], [Grant], [Renewal], [Info], [HolderID]).
//
// It is a package of its own for the reason database/sql/driver is apart
// from database/sql, and gocloud's driver packages from their portable
// types: the people who use locks and the people who write stores read
// different contracts. Users program against package fencedlock (Locker,
// Lease, Options, the errors and the limits), whose documentation lists
// only what they call; backend authors implement this package and check
// their backend with package conformance. A backend imports this package
// (and package fencing for its tokens), not the Locker's.
//
// The errors a backend returns ([ErrNotAcquired], [ErrNotHeld],
// [ErrClosed], [ErrInvalid], [ErrPermanent] and [HeldError]), the limits
// ([MaxKeyLen], [MinTTL], [MaxTTL]), [DefaultReleaseTimeout] (which bounds
// a backend's own clean-up Release too) and [ValidateKey] are defined here,
// and
// package fencedlock re-exports them as the same values
// (fencedlock.ErrNotHeld == driver.ErrNotHeld, fencedlock.HeldError is an
// alias of HeldError): errors.Is and errors.As answer the same whichever
// package the caller names. The errors only a Locker reports
// (fencedlock.ErrLeaseLost, fencedlock.ErrReleased) are in package
// fencedlock.
package driver
