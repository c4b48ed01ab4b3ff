#!/usr/bin/env bash
# Installs what `make bench-tftp` and `make bench-bootconf` drive: tftpd-hpa's
# in.tftpd, atftp, curl and iproute2, and nothing when they are already there.
# The tftpd-hpa package would start its service from its postinst: a
# temporary policy-rc.d denies service starts for the length of the install,
# and whatever was there before is put back afterwards. The bench runs
# in.tftpd itself, in its own namespace and cgroup.
set -euo pipefail

need=()
# command -> the Debian package that has it
while read -r cmd pkg; do
	command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done <<'LIST'
in.tftpd tftpd-hpa
atftp atftp
curl curl
ip iproute2
LIST

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "bench-tftp deps: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
	exit 1
fi
echo "bench-tftp deps: installing ${need[*]}"
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
