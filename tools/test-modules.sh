#!/usr/bin/env bash
# Runs `go test $TESTFLAGS ./...` in every module (make test).
#
# Usage: tools/test-modules.sh GO TESTFLAGS MODULE_DIR...
#
# Most of the suites' time is spent waiting on timers (leases, TTLs, fault
# schedules), not on the CPU: the root module alone kept about one of this
# machine's two cores busy (user+sys 520 s over 570 s of wall time), the
# etcd cluster module about half of one (178 s over 310 s). So the root
# module runs in one stream and the nested modules other than chaos in a
# second, at the same time (each suite must pass on a loaded machine
# anyway); the chaos module runs last, alone: its schedules are the most
# sensitive to the machine's load and their figures are read from its
# output. TEST_STREAMS=1 runs every module one after the other.
#
# The second stream's output is kept in a file and printed when both
# streams are done, so the two do not interleave. Every module runs even
# after a failure; the exit status is 1 if any failed.
set -uo pipefail

go_cmd=$1
flags=$2
shift 2

failed=()

# run DIR: go test in the module at DIR.
run() {
	echo "== go test $1"
	# shellcheck disable=SC2086 # flags are words
	(cd "$1" && "$go_cmd" test $flags ./...)
}

first=()
second=()
last=()
for d in "$@"; do
	case "$d" in
	.) first+=("$d") ;;
	chaos) last+=("$d") ;;
	*) second+=("$d") ;;
	esac
done

if [ "${TEST_STREAMS:-2}" = 1 ]; then
	for d in "${first[@]}" "${second[@]}" "${last[@]}"; do
		run "$d" || failed+=("$d")
	done
else
	log=$(mktemp)
	trap 'rm -f "$log" "$log.failed"' EXIT
	(
		for d in "${second[@]}"; do
			run "$d" || echo "$d" >>"$log.failed"
		done
	) >"$log" 2>&1 &
	bg=$!
	echo "== (in parallel with the first stream, output shown when it ends: ${second[*]})"
	for d in "${first[@]}"; do
		run "$d" || failed+=("$d")
	done
	wait "$bg"
	cat "$log"
	if [ -s "$log.failed" ]; then
		mapfile -t more <"$log.failed"
		failed+=("${more[@]}")
	fi
	for d in "${last[@]}"; do
		run "$d" || failed+=("$d")
	done
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAIL: go test in ${failed[*]}"
	exit 1
fi
