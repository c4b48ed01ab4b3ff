#!/usr/bin/env bash
# Installs what `make bench-ipmi` needs (ipmi_sim from openipmi, ipmitool),
# and nothing when it is already there.
set -euo pipefail

need=()
while read -r cmd pkg; do
	command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done <<'LIST'
ipmi_sim openipmi
ipmitool ipmitool
LIST

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "bench-ipmi deps: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
	exit 1
fi
echo "bench-ipmi deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
