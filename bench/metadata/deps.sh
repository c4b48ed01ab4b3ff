#!/usr/bin/env bash
# Installs wrk (Debian package wrk) for `make bench-metadata`, only when it
# is missing.
set -euo pipefail
command -v wrk >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "bench-metadata: wrk is missing; run as root (or: sudo apt-get install wrk)" >&2
	exit 1
fi
echo "bench-metadata: installing wrk"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends wrk >/dev/null 2>&1 || {
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends wrk >/dev/null
}
