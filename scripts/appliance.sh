#!/usr/bin/env bash
# Assembles dist/appliance/: everything a rack appliance needs, ready to
# copy onto its disk image or install on a Debian box with install.sh.
#
#   rackd                          the static binary (make build)
#   images/enlist-amd64/           the enlistment image (make initramfs),
#                                  for `rackd images import`
#   images/bootloaders/{amd64,arm64}/  network bootloaders from Debian's
#                                  packages (scripts/bootloaders.sh --image)
#   images/bootloaders/grub-amd64/ GRUB's modules for the signed network GRUB,
#                                  which has no http module built in (without
#                                  them, or under Secure Boot, it uses TFTP)
#   rackd.toml                     the appliance's configuration
#   rackd.default.toml             every setting with its default, documented
#   rackd.service                  the systemd unit
#   install.sh, README.md          how to install it
#   SHA256SUMS
#
# Environment: DIST (default dist/appliance). Run from the repository root
# after make build (make appliance does both).
set -euo pipefail

dist=${DIST:-dist/appliance}
start=$SECONDS
step() { printf 'appliance: [%3ds] %s\n' $((SECONDS - start)) "$*"; }
die() {
	echo "appliance: $*" >&2
	exit 1
}

[ -x bin/rackd ] || die "bin/rackd is missing: run make build (make appliance does)"
if ! file bin/rackd 2>/dev/null | grep -q 'statically linked' && ldd bin/rackd >/dev/null 2>&1; then
	die "bin/rackd is dynamically linked; build it with CGO_ENABLED=0 (make build does)"
fi
if [ ! -f build/initramfs/image/rackd-image.json ]; then
	step "building the enlistment image (make initramfs)"
	bash scripts/initramfs.sh
fi

rm -rf "$dist"
mkdir -p "$dist/images/enlist-amd64"
step "rackd ($(./bin/rackd version 2>/dev/null | head -n1 || true))"
install -m 0755 bin/rackd "$dist/rackd"
step "enlistment image"
install -m 0644 build/initramfs/image/vmlinuz build/initramfs/image/initramfs.cpio.gz \
	build/initramfs/image/rackd-image.json "$dist/images/enlist-amd64/"
step "bootloaders"
bash scripts/bootloaders.sh --image --cache build/bootloaders-cache "$dist/images/bootloaders"
install -m 0644 agent/default.toml "$dist/rackd.default.toml"

cat >"$dist/rackd.toml" <<'EOF'
# /etc/rackd/rackd.toml: the appliance's settings. Every setting left out
# keeps its default; rackd.default.toml beside this file documents them all.

# The API, /metrics, /boot/ (iPXE, GRUB, kernels) and /metadata/ (the
# enlistment environment) on every address: machines reach it over the
# provisioning network.
listen = "0.0.0.0:5240"
state_dir = "/var/lib/rackd"
log_format = "json"

[dhcp]
# The interface(s) on the rack's provisioning network. CHANGE THIS: rackd
# answers DHCP there, and only there.
interfaces = ["eth1"]

[tftp]
# Firmware PXE (BIOS pxelinux, UEFI shim and GRUB) fetches over TFTP.
listen = "0.0.0.0:69"
EOF

cat >"$dist/rackd.service" <<'EOF'
[Unit]
Description=rackd: DHCP, TFTP, HTTP boot, enlistment and power for a rack
Documentation=file:///usr/local/share/rackd/README.md
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=/usr/local/bin/rackd serve --config /etc/rackd/rackd.toml
Restart=on-failure
RestartSec=2s
# DHCP (port 67, raw sockets for ARP probes), TFTP (port 69): root's
# network capabilities, and nothing else of the system writable.
StateDirectory=rackd
ReadWritePaths=/var/lib/rackd
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes
LimitNOFILE=65536
# rackd finishes leases in flight and closes its database on SIGTERM.
KillSignal=SIGTERM
TimeoutStopSec=30s

[Install]
WantedBy=multi-user.target
EOF

cat >"$dist/install.sh" <<'EOF'
#!/bin/sh
# Installs rackd from this directory on a systemd machine (as root), starts
# it, and imports the enlistment image. Safe to run again (upgrades).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
install -D -m 0755 "$here/rackd" /usr/local/bin/rackd
install -d -m 0755 /etc/rackd /usr/local/share/rackd
[ -f /etc/rackd/rackd.toml ] || install -m 0644 "$here/rackd.toml" /etc/rackd/rackd.toml
install -m 0644 "$here/rackd.default.toml" "$here/README.md" /usr/local/share/rackd/
cp -R "$here/images" /usr/local/share/rackd/
install -d -m 0755 /var/lib/rackd/boot
install -m 0644 "$here/rackd.service" /etc/systemd/system/rackd.service
# Debian's etcd-server: the member rackd runs beside itself when the box is
# one of a cluster of appliances (rackd cluster init/join). rackd starts and
# stops it: Debian's own etcd service stays off.
if ! command -v etcd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
	echo "install: etcd-server (for rackd cluster init/join)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null ||
		echo "install: apt-get install etcd-server failed; a cluster of appliances needs it" >&2
	systemctl disable --now etcd >/dev/null 2>&1 || true
fi
systemctl daemon-reload
systemctl enable rackd
systemctl restart rackd
echo "install: waiting for rackd"
i=0
until /usr/local/bin/rackd machines list >/dev/null 2>&1; do
	i=$((i + 1))
	[ "$i" -lt 60 ] || { echo "install: rackd did not start; see journalctl -u rackd" >&2; exit 1; }
	sleep 1
done
for im in enlist-amd64 bootloaders/amd64 bootloaders/arm64 bootloaders/grub-amd64; do
	RACKD_STATE_DIR=/var/lib/rackd /usr/local/bin/rackd images import "/usr/local/share/rackd/images/$im"
done
echo "install: done. Edit /etc/rackd/rackd.toml ([dhcp] interfaces), then: systemctl restart rackd"
EOF
chmod 0755 "$dist/install.sh"

kver=$(cat build/initramfs/image/KERNEL_VERSION 2>/dev/null || echo unknown)
cat >"$dist/README.md" <<EOF
# rackd appliance

rackd is the agent of a bare-metal rack appliance: one static binary that
answers DHCP and TFTP/HTTP for the rack's servers, boots unknown ones into
a small enlistment environment that introduces them, drives their BMCs, and
keeps everything in one embedded database.

## What is here

| file | what |
| --- | --- |
| \`rackd\` | the static binary (no libraries needed) |
| \`images/enlist-amd64/\` | the enlistment environment: Debian's kernel $kver and a u-root initramfs whose init runs the enlist client; import it with \`rackd images import\` |
| \`images/bootloaders/\` | network bootloaders from Debian's packages, as three images (amd64: pxelinux for BIOS, shim + GRUB for UEFI, iPXE; arm64: GRUB; grub-amd64: GRUB's modules, which Debian's signed network GRUB loads from rackd's TFTP server because it lacks the http module the boot configs prefer; under Secure Boot GRUB refuses them and loads kernels over TFTP instead) |
| \`rackd.toml\` | the appliance's configuration (goes to /etc/rackd/) |
| \`rackd.default.toml\` | every setting with its default, documented |
| \`rackd.service\` | the systemd unit |
| \`install.sh\` | installs all of the above on a systemd machine |
| \`SHA256SUMS\` | checksums of every file |

## Installing

On the appliance (Debian, or any systemd Linux on x86-64), as root:

    sha256sum -c SHA256SUMS
    ./install.sh
    editor /etc/rackd/rackd.toml      # [dhcp] interfaces: the provisioning network
    systemctl restart rackd

install.sh puts the binary in /usr/local/bin, the configuration in
/etc/rackd (kept if it exists), starts rackd under systemd and imports the
enlistment image and the bootloaders (GRUB's modules among them). The admin API
token is in /var/lib/rackd/admin.token; the CLI on the appliance finds it by
itself:

    export RACKD_STATE_DIR=/var/lib/rackd
    rackd subnets add --help          # give the provisioning network a subnet and a dynamic range
    rackd images list
    rackd machines list               # servers that PXE-boot appear here as NEW

## Flashing a disk image

To build an image instead of installing by hand, copy the files into the
image's root at the same places install.sh uses (/usr/local/bin/rackd,
/etc/rackd/rackd.toml, /etc/systemd/system/rackd.service enabled), and run the \`rackd images import\` lines of
install.sh on first boot (the imports need rackd running).

## The network

The provisioning network's switch ports carry the servers' boot NICs;
rackd must be the only DHCP server there. Servers PXE-boot (BIOS or UEFI;
iPXE NIC ROMs are recognised and fetch their script over HTTP), get a boot
config rendered for their MAC, and unknown ones boot the enlistment
environment: it asks rackd whether it knows the machine, enlists it with
its inventory (CPUs, memory, disks, NICs, DMI identity) and powers it off,
or reboots a known machine that should be network-booting.

Machines reach rackd over the provisioning network by DHCP (UDP 67), TFTP
(UDP 69: BIOS and UEFI PXE firmware, pxelinux, GRUB) and HTTP (TCP 5240:
/boot/ and /metadata/); rackd.toml listens on every address, and configs
point machines at the address they reached rackd by. Operators need only
the API, on the same port 5240 (every API route needs a token). rackd warns
at start when DHCP is on but HTTP or TFTP is out of the machines' reach.
iPXE waits 12-16 s for IPv6 router advertisements on a link without them:
let the router send them, or accept the delay.
EOF

step "checksums"
(cd "$dist" && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum >SHA256SUMS)
step "done: $dist ($(du -sh "$dist" | cut -f1))"
