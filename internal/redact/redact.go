// Package redact prints the values that carry an owner token (a secret:
// whoever has one can renew and release the lock it holds) without it.
// The types themselves (driver.Grant, driver.AcquireRequest,
// fencedlock.Lease) make method-less copies with the token replaced and
// print them with Format.
package redact

import (
	"fmt"
	"strings"
)

// Format prints v, a method-less copy of a value of type name with its
// owner redacted, with f's verb and flags; %#v names the exported type.
func Format(f fmt.State, verb rune, name string, v any) {
	if verb == 'v' && f.Flag('#') {
		s := fmt.Sprintf("%#v", v)
		if i := strings.IndexByte(s, '{'); i >= 0 {
			s = name + s[i:]
		}
		fmt.Fprint(f, s)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), v)
}
