#!/usr/bin/env bash
# Mutation testing of backend/memory with the conformance suite as the
# test (issue 35; docs/mutation.md): gremlins v0.6.0 mutates
# backend/memory/memory.go and runs conformance.Run on each mutant.
#
# backend/memory has no tests of its own: the suite's memory harness lives
# in conformance/ (memory_test.go, faults_test.go). The script copies the
# repository to a temporary directory, puts that harness into the copy's
# backend/memory as an external test package, and runs gremlins there, so
# the repository is never changed. gremlins is installed into
# GREMLINS_BIN (default /tmp/gobin), not added to go.mod.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
bin=${GREMLINS_BIN:-/tmp/gobin}
if ! "$bin/gremlins" --version 2>/dev/null | grep -q 'v0.6.0'; then
	GOBIN="$bin" go install github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" ls-files -z --cached --others --exclude-standard | (cd "$root" && xargs -0 tar -cf -) | tar -xf - -C "$work"
for f in memory_test.go faults_test.go; do
	sed 's/^package conformance_test$/package memory_test/' "$root/conformance/$f" >"$work/backend/memory/zz_conformance_$f"
done
cd "$work"
"$bin/gremlins" unleash --workers "${WORKERS:-1}" --timeout-coefficient 10 \
	--invert-logical --invert-loopctrl --invert-assignments --invert-bitwise \
	--invert-bwassign --remove-self-assignments ${GREMLINS_OUT:+-o "$GREMLINS_OUT"} ./backend/memory
