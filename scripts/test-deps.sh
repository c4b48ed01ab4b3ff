#!/usr/bin/env bash
# Installs what `make test` needs, and nothing when it is already there.
set -euo pipefail

need=()
# command -> the Debian package that has it
while read -r cmd pkg; do
	command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done <<'LIST'
promtool prometheus
gcc gcc
ip iproute2
dig bind9-dnsutils
dhclient isc-dhcp-client
perfdhcp kea-admin
tftp tftp-hpa
atftp atftp
curl curl
udhcpc udhcpc
qemu-system-x86_64 qemu-system-x86
depmod kmod
ipmi_sim openipmi
ipmitool ipmitool
redfishtool redfishtool
ssh-keygen openssh-client
xz xz-utils
zstd zstd
cloud-init cloud-init
cloud-localds cloud-image-utils
fsck.fat dosfstools
mkfs.fat dosfstools
mcopy mtools
blkid util-linux
mkfs.vfat dosfstools
sfdisk fdisk
sgdisk gdisk
growpart cloud-guest-utils
qemu-img qemu-utils
gzip gzip
sha256sum coreutils
ssh openssh-client
mmdebstrap mmdebstrap
mkfs.ext4 e2fsprogs
e2fsck e2fsprogs
dumpe2fs e2fsprogs
mksquashfs squashfs-tools
unsquashfs squashfs-tools
grub-mkimage grub-common
readelf binutils
openssl openssl
dnsmasq dnsmasq-base
chromium chromium
etcd etcd-server
LIST
# file -> the Debian package that has it (firmware the VM tests boot)
while read -r file pkg; do
	[ -e "$file" ] || need+=("$pkg")
done <<'LIST'
/usr/lib/ipxe/qemu/efi-virtio.rom ipxe-qemu
/usr/share/OVMF/OVMF_CODE_4M.fd ovmf
/usr/lib/grub/x86_64-efi/http.mod grub-efi-amd64-bin
/usr/lib/python3/dist-packages/sushy/__init__.py python3-sushy
LIST

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "test-deps: missing ${need[*]}; run as root (or: sudo apt-get install ${need[*]})" >&2
	exit 1
fi
echo "test-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# The prometheus package would start a Prometheus server from its postinst;
# we want only promtool, so deny service starts for the length of the install.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
