package redisscript

import "strings"

// permissionMarkers are the parts of the server's error replies that
// refuse a request for missing permissions or failed authentication: no
// retry can fix them, only an operator. Redis words a denial by where it
// happens and by version; a script's denial arrives as a script error
// ("ERR ... script: SHA, on @user_script:N." through redis.call, the bare
// message through redis.pcall, "ERR Error running script ... @user_script:
// N: ..." before 7.0), so each marker is looked for anywhere in the
// message.
var permissionMarkers = []string{
	// A command, key or channel the request names (EVALSHA, EVAL, KEYS):
	// "-NOPERM this user has no permissions to run the 'evalsha' command",
	// "-NOPERM this user has no permissions to access one of the keys used
	// as arguments" (Redis 6 and 7.0); "-NOPERM User U has no permissions
	// to run the 'evalsha' command", "-NOPERM No permissions to access a
	// key", "-NOPERM No permissions to access a channel" (7.2 on).
	"NOPERM",
	// Authentication: "-NOAUTH Authentication required.", "-WRONGPASS
	// invalid username-password pair or user is disabled."
	"NOAUTH", "WRONGPASS",
	// A command, key or channel a script calls or reaches (Redis 6 and
	// 7.0): "The user executing the script can't run this command or
	// subcommand", "... can't access at least one of the keys mentioned in
	// the command arguments", "... can't publish to the channel mentioned
	// in the command".
	"The user executing the script can't",
	// The same from Redis 7.2 on: "ERR ACL failure in script: User U has no
	// permissions to run the 'incr' command", "ERR ACL failure in script:
	// No permissions to access a key", "... No permissions to access a
	// channel".
	"ACL failure in script",
	// The 7.2 texts themselves, should a server or proxy pass them on
	// without the prefixes above.
	"has no permissions to run the", "No permissions to access a",
}

// PermissionDenied reports whether msg, the text of an error reply, refuses
// the request for missing permissions or failed authentication (see
// permissionMarkers): an error no retry can fix.
func PermissionDenied(msg string) bool {
	for _, m := range permissionMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
