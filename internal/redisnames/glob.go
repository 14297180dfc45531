package redisnames

// GlobEscape escapes the glob characters of a SCAN MATCH pattern ('*',
// '?', '[', ']' and '\') in s, a key name or the start of one, so that the
// pattern matches s itself: GlobEscape(lockKey) + "*" matches the lock key
// and every name made from it (fencedlock list, the conformance harnesses'
// record listing).
func GlobEscape(s string) string {
	b := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
