#!/usr/bin/env bash
# Installs what `make bench-etcd` needs beyond bench-deps (Debian's etcd
# server), and nothing when it is already there; its service is not started
# (see scripts/apt-need.sh).
exec bash "$(dirname "$0")/../../scripts/apt-need.sh" bench-etcd <<'LIST'
etcd etcd-server
LIST
