// Package closeonce is the first step of every Close in the module that
// ends what was registered while the value was open (the etcd backend's
// calls in progress, the memory backend's watches): mark the value closed
// once, under its mutex, and take what is pending, so that Close can end
// it without the lock and a second Close does nothing.
package closeonce

import "sync"

// Take locks mu and, if *closed is false, sets it, takes *pending (leaving
// its zero value, so that nothing is ended twice) and returns it with
// true. If *closed was already set it returns the zero value and false:
// the caller's Close has nothing left to do.
func Take[T any](mu *sync.Mutex, closed *bool, pending *T) (T, bool) {
	mu.Lock()
	defer mu.Unlock()
	var none T
	if *closed {
		return none, false
	}
	*closed = true
	taken := *pending
	*pending = none
	return taken, true
}
