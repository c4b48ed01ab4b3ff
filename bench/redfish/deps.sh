#!/usr/bin/env bash
# Installs what `make bench-redfish` needs (DMTF's redfishtool), and nothing
# when it is already there (see scripts/apt-need.sh).
exec bash "$(dirname "$0")/../../scripts/apt-need.sh" "bench-redfish deps" <<'LIST'
redfishtool redfishtool
LIST
