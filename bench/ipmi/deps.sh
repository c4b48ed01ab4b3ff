#!/usr/bin/env bash
# Installs what `make bench-ipmi` needs (ipmi_sim from openipmi, ipmitool),
# and nothing when it is already there (see scripts/apt-need.sh).
exec bash "$(dirname "$0")/../../scripts/apt-need.sh" "bench-ipmi deps" <<'LIST'
ipmi_sim openipmi
ipmitool ipmitool
LIST
