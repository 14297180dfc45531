// Package leasectx holds the context key by which package fencedlock
// marks the contexts of a Lease (Lease.Context, the context Do gives its
// function, and so every context derived from them), so that the packages
// built on fencedlock recognise a context that comes from one of their
// leases without a second mark: rwlock refuses a nested RLock or Lock on
// it, as the root refuses a nested Acquire.
package leasectx

// Key is the context key; its value is the *fencedlock.Lease the context
// comes from.
type Key struct{}
