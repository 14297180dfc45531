package redisscript

// The scripts of sets of keys (driver.MultiLocker), composed as the others.
var (
	MultiAcquireLua = mustCompose("multi_acquire.lua") // take a set, all or nothing
	MultiRenewLua   = mustCompose("multi_renew.lua")   // renew a set, all or nothing
	MultiReleaseLua = mustCompose("multi_release.lua") // release the owner's keys of a set
)
