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
#   DEST/grub-amd64/  grub/x86_64-efi/*.mod, *.lst  GRUB's modules (grub-efi-amd64-bin
#                                          of the signed GRUB's version)
#
# each with its rackd-image.json (`make bootloaders` imports all three).
# Debian's signed network GRUB has no http module built in: it loads the
# modules it lacks from $prefix/x86_64-efi/ on the TFTP server, i.e.
# grub/x86_64-efi/, and then fetches kernels and initrds over HTTP. Without
# them, or under Secure Boot (which refuses unsigned modules), it fetches
# them over TFTP, which works but is slower. The modules are a separate
# image so that either way can be served.
#
# Without --image, the same files go flat into DEST, a boot tree (<state
# dir>/boot), which rackd serves when no bootloader image names a file.
#
# The .debs are kept in the --cache directory (default: a temporary one) and
# not downloaded again while they are there. apt works on a private state
# directory under it, one per architecture, so the arm64 package comes
# without adding arm64 to the system's dpkg architectures and nothing of
# the system's apt state changes.
#
# The packages come from the system's APT sources (a Debian mirror, bookworm
# or later, component main), or from the one-line sources file named by
# BOOTLOADERS_SOURCES (e.g. a local mirror: "deb http://mirror.lan/debian
# bookworm main"). Without access to a mirror it stops saying so, with the
# ways out: a proxy, another mirror, or the .debs copied into the cache.
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

die() {
	echo "bootloaders: $*" >&2
	exit 1
}

# What to do when the packages cannot be had from here; said with every
# such failure.
ways_out="Ways out: give this machine access to the mirror (behind a proxy: export http_proxy, or Acquire::http::Proxy in /etc/apt/apt.conf.d/),
  name a reachable mirror with BOOTLOADERS_SOURCES=FILE (one line: deb http://MIRROR/debian bookworm main),
  or copy the .debs (pxelinux syslinux-common shim-signed grub-efi-amd64-signed ipxe for amd64, grub-efi-arm64-signed for arm64)
  from a machine that has access into $cache/ and run this again."

# Sources: BOOTLOADERS_SOURCES, or the system's.
src_opts=()
if [ -n "${BOOTLOADERS_SOURCES:-}" ]; then
	[ -r "$BOOTLOADERS_SOURCES" ] || die "BOOTLOADERS_SOURCES=$BOOTLOADERS_SOURCES is not a readable file"
	mkdir -p "$work/no-parts"
	src_opts=(-o Dir::Etc::sourcelist="$(cd "$(dirname "$BOOTLOADERS_SOURCES")" && pwd)/$(basename "$BOOTLOADERS_SOURCES")" -o Dir::Etc::sourceparts="$work/no-parts")
fi

# has_sources: whether any APT source is configured at all (apt-get update
# succeeds, fetching nothing, when there is none).
has_sources() {
	local f
	for f in ${BOOTLOADERS_SOURCES:-/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources}; do
		[ -r "$f" ] && grep -Eq '^[[:space:]]*(deb[[:space:]]|Types:.*deb)' "$f" && return 0
	done
	return 1
}

# apt_private ARCH ARGS...: apt-get with its own lists and archives under
# the cache, for ARCH only, reading the system's sources (or
# BOOTLOADERS_SOURCES) and keyrings.
apt_private() {
	local arch=$1 dir=$cache/apt-$1
	shift
	mkdir -p "$dir/lists/partial" "$dir/archives/partial"
	apt-get -q \
		-o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir" -o Dir::Cache::archives="$dir/archives" \
		-o Dir::State::status=/dev/null -o APT::Architecture="$arch" -o APT::Architectures::="$arch" \
		-o Acquire::Languages=none -o APT::Sandbox::User=root ${src_opts[@]+"${src_opts[@]}"} "$@"
}

# update ARCH: fetch ARCH's package lists, or stop saying why not. apt-get
# update exits 0 when it could reach no mirror (it only warns), and when no
# source is configured at all; apt-get download then says "Unable to locate
# package", which hides the cause.
update() {
	local arch=$1 log=$work/apt-update-$1.log
	has_sources || die "no APT sources are configured (${BOOTLOADERS_SOURCES:-/etc/apt/sources.list, /etc/apt/sources.list.d/}): the bootloaders come from Debian's packages.
$ways_out"
	apt_private "$arch" update >"$log" 2>&1 || {
		cat "$log" >&2
		die "apt-get update for $arch failed (above).
$ways_out"
	}
	if [ -z "$(find "$cache/apt-$arch/lists" -name '*Packages*' 2>/dev/null | head -1)" ]; then
		grep -E '^(Err|E|W):|^  ' "$log" >&2 || cat "$log" >&2
		die "apt-get update fetched no package lists for $arch: the Debian mirror is not reachable from here (above), or the sources name no suite with component main.
$ways_out"
	fi
	if grep -q '^W: Failed to fetch' "$log"; then
		echo "bootloaders: some package lists could not be fetched (going on with the others):" >&2
		grep '^W: Failed to fetch' "$log" >&2
	fi
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
		update "$arch"
	fi
	local log=$work/apt-download-$arch.log
	(cd "$cache" && apt_private "$arch" download "${missing[@]}") >"$log" 2>&1 || {
		cat "$log" >&2
		if grep -q 'Unable to locate package' "$log"; then
			die "the APT sources have no $(grep -o 'Unable to locate package [^ ]*' "$log" | sed 's/.* //' | sort -u | tr '\n' ' ')for $arch: they must name Debian (bookworm or later) with component main.
$ways_out"
		fi
		die "apt-get download of ${missing[*]} ($arch) failed (above).
$ways_out"
	}
}

fetch amd64 pxelinux syslinux-common shim-signed grub-efi-amd64-signed ipxe
fetch arm64 grub-efi-arm64-signed

# GRUB's modules, of the version of the signed GRUB: a module of another
# version may not load. grub-efi-amd64-signed 1+2.06+13+deb12u1 is built
# from grub2 2.06-13+deb12u1.
signed=$(ls "$cache"/grub-efi-amd64-signed_*_amd64.deb | tail -n1)
grubver=$(dpkg-deb -f "$signed" Version | sed 's/^1+//; s/+\([0-9]*\)+/-\1+/')
have=
for deb in "$cache"/grub-efi-amd64-bin_*_amd64.deb; do
	if [ -f "$deb" ] && [ "$(dpkg-deb -f "$deb" Version)" = "$grubver" ]; then
		have=$deb
	fi
done
if [ -z "$have" ]; then
	echo "bootloaders: downloading grub-efi-amd64-bin $grubver (amd64)"
	rm -f "$cache"/grub-efi-amd64-bin_*_amd64.deb
	log=$work/apt-download-grub.log
	(cd "$cache" && apt_private amd64 download "grub-efi-amd64-bin=$grubver") >"$log" 2>&1 || {
		cat "$log" >&2
		die "apt-get download of grub-efi-amd64-bin $grubver (the signed GRUB's version) failed (above).
$ways_out"
	}
fi
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

# The modules, as arch grub-amd64 of the list.
mods=$work/root/usr/lib/grub/x86_64-efi
[ -f "$mods/http.mod" ] || die "grub-efi-amd64-bin has no x86_64-efi/http.mod any more"
list+=$(cd "$mods" && for f in *.mod *.lst; do printf 'grub-amd64 usr/lib/grub/x86_64-efi/%s grub/x86_64-efi/%s\n' "$f" "$f"; done)

for arch in amd64 arm64 grub-amd64; do
	out=$dest
	imname=bootloaders imarch=$arch
	if [ "$arch" = grub-amd64 ]; then
		imname=grub-modules imarch=amd64
	fi
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
		mkdir -p "$out/$(dirname "$name")"
		install_file "$work/root/$src" "$out/$(dirname "$name")" "$(basename "$name")"
		sum=$(sha256sum "$out/$name" | cut -d' ' -f1)
		size=$(stat -c %s "$out/$name")
		files+=("$(printf '    {"path": "%s", "role": "bootloader", "sha256": "%s", "size": %s}' "$name" "$sum" "$size")")
		[ "$arch" = grub-amd64 ] || printf '  %-6s %-14s %s\n' "$arch" "$name" "${sum:0:16}"
	done <<<"$list"
	[ "$arch" != grub-amd64 ] || printf '  %-6s %-14s %s modules and lists of grub-efi-amd64-bin %s\n' amd64 grub/x86_64-efi/ "${#files[@]}" "$grubver"
	if [ $image = 1 ]; then
		{
			printf '{\n  "name": "%s",\n  "arch": "%s",\n  "purpose": "bootloader",\n  "files": [\n' "$imname" "$imarch"
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
	echo "bootloaders: image directories $dest/amd64, $dest/arm64 and $dest/grub-amd64 (rackd images import DIR)"
else
	echo "bootloaders: installed in $dest"
fi
