#!/usr/bin/env bash
# Installs the Debian packages whose servers the tests start on loopback
# ports of their own. Idempotent; quiet when everything is there already.
#
# On a developer's machine it installs and nothing else: servers already
# running (a local redis-server or PostgreSQL) are left alone; the tests do
# not need their ports. Only on CI (CI=true, as .ci/run sets) does it stop
# the system-wide services that a package install may have started.
set -euo pipefail

need=()
command -v redis-server   >/dev/null || need+=(redis-server)
command -v redis-cli      >/dev/null || need+=(redis-tools)
command -v redis-sentinel >/dev/null || need+=(redis-sentinel)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v pgbouncer      >/dev/null || need+=(pgbouncer)  # backend/postgres: conformance through a transaction pooler
command -v setpriv        >/dev/null || need+=(util-linux) # cmd/fencedlock TestKillSwitchUnsignallable

if [ ${#need[@]} -gt 0 ]; then
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# CI only: package installs may start system-wide services on the default
# ports; the tests use their own servers, so stop those to free memory.
if [ "${CI:-}" = true ]; then
	for svc in redis-server redis-sentinel postgresql pgbouncer; do
		(service "$svc" stop >/dev/null 2>&1 || true)
	done
fi

redis-server --version
ls -d /usr/lib/postgresql/*/bin
