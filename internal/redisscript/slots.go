package redisscript

// SlotAcquireLua is the semaphore's slot script (slot_acquire.lua): one
// attempt at the first free of several locks.
var SlotAcquireLua = mustCompose("slot_acquire.lua")
