#!/usr/bin/env bash
# Installs what `make bench-tftp` and `make bench-bootconf` drive: tftpd-hpa's
# in.tftpd, atftp, curl and iproute2, and nothing when they are already there.
# The tftpd-hpa service is not started (see scripts/apt-need.sh): the bench
# runs in.tftpd itself, in its own namespace and cgroup.
exec bash "$(dirname "$0")/../../scripts/apt-need.sh" "bench-tftp deps" <<'LIST'
in.tftpd tftpd-hpa
atftp atftp
curl curl
ip iproute2
LIST
