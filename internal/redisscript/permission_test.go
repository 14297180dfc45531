package redisscript

import (
	"errors"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
)

// TestPermissionDenied: every permission or authentication error Redis
// returns, of the request or inside a script, in the words of each version
// (7.0's as redis-server 7.0.15 sends them to the lock scripts, see
// internal/redisedge; 6.x's and 7.2's as those versions word them), is
// permanent once wrapped; the other errors of a script are not.
func TestPermissionDenied(t *testing.T) {
	denied := []string{
		// redis-server 7.0: the request.
		"NOPERM this user has no permissions to run the 'evalsha' command",
		"NOPERM this user has no permissions to run the 'eval' command",
		"NOPERM this user has no permissions to access one of the keys used as arguments",
		// redis-server 7.0: inside a script, through redis.pcall and redis.call.
		"ERR The user executing the script can't run this command or subcommand",
		"ERR The user executing the script can't run this command or subcommand script: 532f6e60ac8cc67a388fef8848f8abf2a3de9469, on @user_script:31.",
		"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: f6c7d565b552c0fa2a370fc29ebc6aeb21dc4eee, on @user_script:1.",
		"ERR The user executing the script can't publish to the channel mentioned in the command script: ac9704e0e06f55bd3dc22e88e328552e3ce0150c, on @user_script:46.",
		// Redis 6.x: inside a script.
		"ERR Error running script (call to f_532f6e60ac8cc67a388fef8848f8abf2a3de9469): @user_script:31: @user_script: 31: The user executing the script can't run this command or subcommand",
		// Redis 7.2 and later: the request, and inside a script.
		"NOPERM User fencedlock has no permissions to run the 'evalsha' command",
		"NOPERM No permissions to access a key",
		"NOPERM No permissions to access a channel",
		"ERR ACL failure in script: User fencedlock has no permissions to run the 'incr' command script: 532f6e60ac8cc67a388fef8848f8abf2a3de9469, on @user_script:31.",
		"ERR ACL failure in script: No permissions to access a key script: 532f6e60ac8cc67a388fef8848f8abf2a3de9469, on @user_script:31.",
		"ERR ACL failure in script: No permissions to access a channel script: ac9704e0e06f55bd3dc22e88e328552e3ce0150c, on @user_script:46.",
		// Authentication.
		"NOAUTH Authentication required.",
		"WRONGPASS invalid username-password pair or user is disabled.",
	}
	transient := []string{
		"NOSCRIPT No matching script. Please use EVAL.",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
		"LOADING Redis is loading the dataset in memory",
		"READONLY You can't write against a read only replica.",
		"OOM command not allowed when used memory > 'maxmemory'. script: 532f6e60ac8cc67a388fef8848f8abf2a3de9469, on @user_script:14.",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"ERR Error running script (call to f_1): @user_script:9: ERR value is not an integer or out of range",
	}
	for _, msg := range denied {
		err := Wrap("acquire", "k", errors.New(msg), false, true)
		if !PermissionDenied(msg) || !errors.Is(err, driver.ErrPermanent) {
			t.Errorf("%q: %v, not permanent", msg, err)
		}
	}
	for _, msg := range transient {
		if err := Wrap("acquire", "k", errors.New(msg), false, true); PermissionDenied(msg) || errors.Is(err, driver.ErrPermanent) {
			t.Errorf("%q: %v, permanent", msg, err)
		}
	}
}
