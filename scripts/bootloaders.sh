#!/usr/bin/env bash
# Gathers the network bootloaders from Debian's packages: nothing is vendored
# or committed, and the packages are downloaded, not installed.
#
#   bootloaders.sh [--image] [--cache DIR] DEST
#
# With --image, DEST gets two importable image directories (purpose
# bootloader; `rackd images import DEST/amd64`, then DEST/arm64; `make
# bootloaders` does both):
#
#   DEST/amd64/  pxelinux.0, ldlinux.c32   BIOS PXE           (pxelinux, syslinux-common)
#                bootx64.efi, grubx64.efi  x86-64 UEFI        (shim-signed, grub-efi-amd64-signed;
#                                                              shim loads grubx64.efi beside it)
#                undionly.kpxe, ipxe.efi,  iPXE for BIOS and UEFI (ipxe)
#                snponly.efi
#   DEST/arm64/  grubaa64.efi              arm64 UEFI         (grub-efi-arm64-signed)
#
# each with its rackd-image.json. Without --image, the same files go flat
# into DEST, a boot tree (<state dir>/boot), which rackd serves when no
# bootloader image names a file.
#
# The .debs are kept in the --cache directory (default: a temporary one) and
# not downloaded again while they are there. apt works on a private state
# directory under it, one per architecture, so the arm64 package comes
# without adding arm64 to the system's dpkg architectures and nothing of
# the system's apt state changes.
set -euo pipefail

image=0
cache=
while [ $# -gt 1 ]; do
	case $1 in
	--image) image=1; shift ;;
	--cache) cache=$2; shift 2 ;;
	*) break ;;
	esac
done
dest=${1:?usage: bootloaders.sh [--image] [--cache DIR] DEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$cache" ]; then
	cache=$work/cache
fi
mkdir -p "$cache" "$dest"
cache=$(cd "$cache" && pwd)
# One run at a time per cache: two apt-get downloads into one directory
# would trip over each other's partial files.
exec 9>"$cache/.lock"
flock -w 600 9 || { echo "bootloaders: $cache is locked by another run" >&2; exit 1; }

# apt_private ARCH ARGS...: apt-get with its own lists and archives under
# the cache, for ARCH only, reading the system's sources and keyrings.
apt_private() {
	local arch=$1 dir=$cache/apt-$1
	shift
	mkdir -p "$dir/lists/partial" "$dir/archives/partial"
	apt-get -q \
		-o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir" -o Dir::Cache::archives="$dir/archives" \
		-o Dir::State::status=/dev/null -o APT::Architecture="$arch" -o APT::Architectures::="$arch" \
		-o Acquire::Languages=none -o APT::Sandbox::User=root "$@"
}

# fetch ARCH PKG...: PKG_*_ARCH.deb (or _all) into the cache, unless there.
fetch() {
	local arch=$1 missing=()
	shift
	for p in "$@"; do
		compgen -G "$cache/${p}_*_${arch}.deb" >/dev/null || compgen -G "$cache/${p}_*_all.deb" >/dev/null || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "bootloaders: downloading ${missing[*]} ($arch)"
	# The package lists are fetched once a day at most.
	if [ -z "$(find "$cache/apt-$arch/lists" -name '*Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
		apt_private "$arch" update >"$work/apt-update-$arch.log" 2>&1 || {
			cat "$work/apt-update-$arch.log" >&2
			echo "bootloaders: apt-get update for $arch failed (no network to the Debian mirror?)" >&2
			exit 1
		}
	fi
	(cd "$cache" && apt_private "$arch" download "${missing[@]}") >"$work/apt-download-$arch.log" 2>&1 || {
		cat "$work/apt-download-$arch.log" >&2
		echo "bootloaders: apt-get download of ${missing[*]} ($arch) failed" >&2
		exit 1
	}
}

fetch amd64 pxelinux syslinux-common shim-signed grub-efi-amd64-signed ipxe
fetch arm64 grub-efi-arm64-signed
for deb in "$cache"/*.deb; do
	dpkg-deb -x "$deb" "$work/root"
done

# arch, source in the packages, name served
list='
amd64 usr/lib/PXELINUX/pxelinux.0 pxelinux.0
amd64 usr/lib/syslinux/modules/bios/ldlinux.c32 ldlinux.c32
amd64 usr/lib/shim/shimx64.efi.signed bootx64.efi
amd64 usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed grubx64.efi
amd64 usr/lib/ipxe/undionly.kpxe undionly.kpxe
amd64 boot/ipxe.efi ipxe.efi
amd64 usr/lib/ipxe/snponly.efi snponly.efi
arm64 usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed grubaa64.efi
'

# install SRC DIR NAME: write beside, then rename: a client never fetches
# half a file.
install_file() {
	install -m 0644 "$1" "$2/.$3.tmp"
	mv -f "$2/.$3.tmp" "$2/$3"
}

for arch in amd64 arm64; do
	out=$dest
	if [ $image = 1 ]; then
		out=$dest/$arch
		mkdir -p "$out"
		rm -f "$out/rackd-image.json"
	fi
	files=()
	while read -r a src name; do
		[ "$a" = "$arch" ] || continue
		if [ ! -f "$work/root/$src" ]; then
			echo "bootloaders: $src is not in the packages any more" >&2
			exit 1
		fi
		install_file "$work/root/$src" "$out" "$name"
		sum=$(sha256sum "$out/$name" | cut -d' ' -f1)
		size=$(stat -c %s "$out/$name")
		files+=("$(printf '    {"path": "%s", "role": "bootloader", "sha256": "%s", "size": %s}' "$name" "$sum" "$size")")
		printf '  %-6s %-14s %s\n' "$arch" "$name" "${sum:0:16}"
	done <<<"$list"
	if [ $image = 1 ]; then
		{
			printf '{\n  "name": "bootloaders",\n  "arch": "%s",\n  "purpose": "bootloader",\n  "files": [\n' "$arch"
			for i in "${!files[@]}"; do
				sep=,
				[ "$i" -eq $((${#files[@]} - 1)) ] && sep=
				printf '%s%s\n' "${files[$i]}" "$sep"
			done
			printf '  ]\n}\n'
		} >"$out/.rackd-image.json.tmp"
		mv -f "$out/.rackd-image.json.tmp" "$out/rackd-image.json"
	fi
done
if [ $image = 1 ]; then
	echo "bootloaders: image directories $dest/amd64 and $dest/arm64 (rackd images import DIR)"
else
	echo "bootloaders: installed in $dest"
fi
