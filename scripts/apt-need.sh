#!/usr/bin/env bash
# apt-need.sh LABEL: installs the Debian packages of the commands listed on
# standard input ("command package" per line) that are missing, and nothing
# when all are there. Packages that would start their service from their
# postinst are kept from it: a temporary policy-rc.d denies service starts for
# the length of the install, and whatever was there before is put back.
# Used by the benchmarks' deps steps.
set -euo pipefail
label=${1:?usage: apt-need.sh LABEL < "command package" lines}

need=()
while read -r cmd pkg; do
	[ -n "$cmd" ] || continue
	command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "$label: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
	exit 1
fi
echo "$label: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
saved=""
if [ -e "$policy" ]; then
	saved=$(mktemp)
	cp -p "$policy" "$saved"
fi
restore() {
	if [ -n "$saved" ]; then
		cp -p "$saved" "$policy"
		rm -f "$saved"
	else
		rm -f "$policy"
	fi
}
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod +x "$policy"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
