#!/usr/bin/env bash
# Installs what `make bench-dhcp` needs (Kea's perfdhcp and kea-dhcp4,
# dnsmasq, iproute2), and nothing when it is already there; the Kea package's
# service is not started (see scripts/apt-need.sh).
exec bash "$(dirname "$0")/../../scripts/apt-need.sh" bench-deps <<'LIST'
perfdhcp kea-admin
kea-dhcp4 kea-dhcp4-server
dnsmasq dnsmasq-base
ip iproute2
LIST
