#!/usr/bin/env bash
# Installs the Debian packages whose servers the tests start on loopback
# ports of their own. Idempotent; quiet when everything is there already.
set -euo pipefail

need=()
command -v redis-server   >/dev/null || need+=(redis-server)
command -v redis-cli      >/dev/null || need+=(redis-tools)
command -v redis-sentinel >/dev/null || need+=(redis-sentinel)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)

if [ ${#need[@]} -gt 0 ]; then
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Package installs may start system-wide services on the default ports; the
# tests use their own servers, so stop those to free memory and ports.
for svc in redis-server redis-sentinel postgresql; do
	(service "$svc" stop >/dev/null 2>&1 || true)
done

redis-server --version
ls -d /usr/lib/postgresql/*/bin
