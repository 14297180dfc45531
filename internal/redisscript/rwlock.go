package redisscript

// RWLockLua is the read-write lock's script (rwlock.lua): acquire, renew
// and release of read and write leases.
var RWLockLua = mustCompose("rwlock.lua")
