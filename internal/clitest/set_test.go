//go:build unix

package clitest

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckSetHeld drives CheckSetHeld with a stand-in binary, a shell
// script that refuses (exit 75) a `run --try` naming a key of $HELD and
// runs the command of any other.
func TestCheckSetHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locker")
	script := `#!/bin/sh
shift 2
while [ "$1" != "--" ]; do
	case " $HELD " in *" $1 "*) exit 75 ;; esac
	shift
done
shift
exec "$@"
`
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	b := Bin{Name: "locker", Path: path, RunTimeout: 20 * time.Second}
	b.CheckSetHeld(t, []string{"HELD=a b"}, "a", "b", "c", 75)
}
