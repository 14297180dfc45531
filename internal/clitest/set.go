package clitest

import "testing"

// CheckSetHeld checks, while a `run` of the binary holds a set of keys,
// that the set excludes the runs that overlap it: `run --try inside`
// (inside a key of the set) and `run --try shared free` (shared a key of
// the set, free one outside it) exit with exitNotAcquired, and the refused
// set took none of its keys (no partial grant): `run --try free` then
// exits 0.
func (b *Bin) CheckSetHeld(t *testing.T, env []string, inside, shared, free string, exitNotAcquired int) {
	t.Helper()
	if code, p := b.Run(t, env, "run", "--try", inside, "--", "true"); code != exitNotAcquired {
		t.Errorf("run --try %s inside the held set: exit %d, want %d; stderr:\n%s", inside, code, exitNotAcquired, p.Stderr)
	}
	if code, p := b.Run(t, env, "run", "--try", shared, free, "--", "true"); code != exitNotAcquired {
		t.Errorf("run --try %s %s overlapping the held set: exit %d, want %d; stderr:\n%s", shared, free, code, exitNotAcquired, p.Stderr)
	}
	if code, p := b.Run(t, env, "run", "--try", free, "--", "true"); code != 0 {
		t.Errorf("%s after a refused set %s %s: exit %d, want 0 (the refused set took %s: a partial grant); stderr:\n%s", free, shared, free, code, free, p.Stderr)
	}
}
