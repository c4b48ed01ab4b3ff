#!/usr/bin/env bash
# Gathers the network bootloaders from Debian's packages into DEST (the boot
# tree rackd serves over TFTP and HTTP, <state dir>/boot): nothing is
# vendored or committed. The packages are downloaded, not installed.
#
#   pxelinux.0, ldlinux.c32   BIOS PXE           (pxelinux, syslinux-common)
#   bootx64.efi, grubx64.efi  x86-64 UEFI        (shim-signed, grub-efi-amd64-signed;
#                                                 shim loads grubx64.efi beside it)
#   undionly.kpxe, ipxe.efi,  iPXE for BIOS and UEFI (ipxe)
#   snponly.efi
set -euo pipefail

dest=${1:?usage: bootloaders.sh DEST}
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pkgs=(pxelinux syslinux-common shim-signed grub-efi-amd64-signed ipxe)
echo "bootloaders: downloading ${pkgs[*]}"
(cd "$work" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) || {
	echo "bootloaders: apt-get download failed (run 'apt-get update' first?)" >&2
	exit 1
}
for deb in "$work"/*.deb; do
	dpkg-deb -x "$deb" "$work/root"
done

# source in the packages -> name in the boot tree
while read -r src name; do
	if [ ! -f "$work/root/$src" ]; then
		echo "bootloaders: $src is not in the packages any more" >&2
		exit 1
	fi
	# Write beside, then rename: a client never fetches half a file.
	install -m 0644 "$work/root/$src" "$dest/.$name.tmp"
	mv -f "$dest/.$name.tmp" "$dest/$name"
	printf '  %-14s %s\n' "$name" "$(sha256sum "$dest/$name" | cut -c1-16)"
done <<'LIST'
usr/lib/PXELINUX/pxelinux.0 pxelinux.0
usr/lib/syslinux/modules/bios/ldlinux.c32 ldlinux.c32
usr/lib/shim/shimx64.efi.signed bootx64.efi
usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed grubx64.efi
usr/lib/ipxe/undionly.kpxe undionly.kpxe
boot/ipxe.efi ipxe.efi
usr/lib/ipxe/snponly.efi snponly.efi
LIST
echo "bootloaders: installed in $dest"
