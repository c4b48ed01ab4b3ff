#!/usr/bin/env bash
# Builds the enlistment environment: Debian's kernel plus a u-root initramfs
# whose uinit is the enlist client, as an image directory that
# `rackd images import DIR` takes (purpose enlist, arch amd64).
#
#   OUT/kernel/<pkg>/     the kernel package, extracted (not installed: /boot
#                         and /lib/modules of this machine are untouched);
#                         kept as a cache between builds
#   OUT/modules/          the NIC modules of initramfs/modules.txt with their
#                         dependencies, and depmod's files for just those
#   OUT/image/            vmlinuz, initramfs.cpio.gz, rackd-image.json
#
# With --if-stale the build is skipped when OUT/image was built from the
# same sources: this script, initramfs/commands.txt and the module list,
# go.mod, go.sum, the module's Go files the uinit is built from, the extra
# files, and the knobs below (their digest is
# kept in OUT/source.key). An image left from an older checkout is rebuilt
# rather than booted: its client may speak an older protocol.
#
# Environment: OUT (default build/initramfs), KERNEL_PKG (default: the
# versioned package Debian's linux-image-amd64 depends on), KERNEL_DIR
# (where it is extracted, default OUT/kernel), ENLIST_PKG (the
# uinit's Go package, default ./enlist/cmd/enlist), UINIT_NAME (its name in
# /bin, default enlist), IMAGE_NAME (default rackd-enlist), MODULES_FILE
# (default initramfs/modules.txt) and MODULES_DEST (where the list goes in
# the archive, default etc/rackd-enlist/modules), EXTRA_FILES (more files
# for the archive, space-separated SRC:DEST pairs, DEST relative to /; an
# ELF file's shared libraries are not added: name them too). The appliance's
# initramfs is this build with other knobs (scripts/appliance-image.sh).
# Run from the repository root (make initramfs does).
set -euo pipefail

out=${OUT:-build/initramfs}
enlist_pkg=${ENLIST_PKG:-./enlist/cmd/enlist}
uinit_name=${UINIT_NAME:-enlist}
image_name=${IMAGE_NAME:-rackd-enlist}
modules_file=${MODULES_FILE:-initramfs/modules.txt}
modules_dest=${MODULES_DEST:-etc/rackd-enlist/modules}
read -r -a extra_files <<<"${EXTRA_FILES:-}"
cmdline=${IMAGE_CMDLINE:-console=tty0 console=ttyS0,115200}
start=$SECONDS
step() { printf 'initramfs: [%3ds] %s\n' $((SECONDS - start)) "$*"; }
die() {
	echo "initramfs: $*" >&2
	exit 1
}

for tool in apt-get dpkg-deb depmod gzip sha256sum go flock; do
	command -v "$tool" >/dev/null || die "$tool not found (depmod is in Debian's kmod package; make test-deps installs it)"
done
[ -f initramfs/modules.txt ] || die "run from the repository root"
[ -f "$modules_file" ] || die "MODULES_FILE=$modules_file: no such file"
for pair in ${extra_files[@]+"${extra_files[@]}"}; do
	[[ $pair == *:* ]] && [ -e "${pair%%:*}" ] || die "EXTRA_FILES: $pair is not SRC:DEST with an existing SRC"
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time per OUT: two test processes may ask at once.
exec 9>"$out/.lock"
if ! flock -n 9; then
	step "waiting for another build in $out (lock $out/.lock)"
	flock 9
fi

# source_key: the digest of everything the image is built from.
source_key() {
	local files
	files=$(go list -deps -f '{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}' "$enlist_pkg") || die "go list $enlist_pkg failed"
	{
		printf '%s\n' "$enlist_pkg" "$uinit_name" "$image_name" "$cmdline" "${KERNEL_PKG:-}" "$modules_file" "$modules_dest"
		cat "${BASH_SOURCE[0]}" go.mod go.sum initramfs/commands.txt "$modules_file"
		for pair in ${extra_files[@]+"${extra_files[@]}"}; do
			printf '%s\n' "${pair#*:}"
			find "${pair%%:*}" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | cut -d" " -f1
		done
		printf '%s\n' "$files" | LC_ALL=C sort | grep . | while read -r f; do
			printf '%s\n' "${f#"$PWD"/}"
			cat "$f"
		done
	} | sha256sum | cut -c1-32
}
key=$(source_key)
if [ "${1:-}" = --if-stale ]; then
	if [ -f "$out/image/rackd-image.json" ] && [ "$(cat "$out/source.key" 2>/dev/null)" = "$key" ]; then
		exit 0
	fi
	step "building: $out/image is missing or was built from other sources"
fi
rm -f "$out/source.key"

# download PKG... into the current directory, refreshing the package lists
# once if the versions they name are gone from the mirror.
download() {
	apt-get download "$@" >/dev/null 2>&1 && return 0
	step "apt-get download $* failed; refreshing the package lists"
	apt-get update -qq >/dev/null 2>&1 || true
	apt-get download "$@" >/dev/null || die "apt-get download $* failed"
}

# 1. The kernel.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=${KERNEL_PKG:-}
if [ -z "$pkg" ]; then
	step "resolving linux-image-amd64"
	(cd "$work" && download linux-image-amd64)
	# Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)
	pkg=$(dpkg-deb -f "$work"/linux-image-amd64_*.deb Depends | sed -n 's/^\(linux-image-[^ ,]*\).*/\1/p')
	[ -n "$pkg" ] || die "cannot read the kernel package linux-image-amd64 depends on"
fi
kroot=${KERNEL_DIR:-$out/kernel}/$pkg
if [ ! -f "$kroot/.done" ]; then
	step "downloading $pkg"
	(cd "$work" && download "$pkg")
	rm -rf "$kroot"
	mkdir -p "$kroot"
	step "extracting $pkg"
	dpkg-deb -x "$work/$pkg"_*.deb "$kroot"
	touch "$kroot/.done"
fi
kver=$(basename "$(ls -d "$kroot"/lib/modules/*/ | head -n1)")
[ -n "$kver" ] && [ -f "$kroot/boot/vmlinuz-$kver" ] || die "no kernel in $kroot"
moddir=$kroot/lib/modules/$kver
if [ ! -f "$moddir/modules.dep" ]; then
	# The package carries no modules.dep: its postinst runs depmod.
	step "depmod for $kver"
	depmod -b "$kroot" "$kver"
fi

# 2. The modules: MODULES_FILE and what they need, by modules.dep.
step "resolving the modules of $modules_file"
declare -A want=()
queue=()
while read -r name; do
	name=${name%%#*}
	name=${name//[[:space:]]/}
	[ -n "$name" ] || continue
	alt=${name//_/-}
	line=$(grep -E "/(${name}|${alt})\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | head -n1 || true)
	if [ -z "$line" ]; then
		if grep -qE "/(${name}|${alt})\.ko\$" "$moddir/modules.builtin"; then
			step "  $name is built into $kver"
			continue
		fi
		die "module $name is neither in $kver's modules.dep nor built in"
	fi
	queue+=("${line%%:*}")
done <"$modules_file"
while [ ${#queue[@]} -gt 0 ]; do
	m=${queue[0]}
	queue=("${queue[@]:1}")
	[ -n "${want[$m]:-}" ] && continue
	want[$m]=1
	deps=$(grep -E "^${m//./\\.}:" "$moddir/modules.dep" | cut -d: -f2)
	for d in $deps; do
		queue+=("$d")
	done
done
mods=$out/modules
rm -rf "$mods"
mkdir -p "$mods/lib/modules/$kver"
for m in $(printf '%s\n' "${!want[@]}" | LC_ALL=C sort); do
	install -D -m 0644 "$moddir/$m" "$mods/lib/modules/$kver/$m"
done
cp "$moddir/modules.builtin" "$moddir/modules.builtin.modinfo" "$mods/lib/modules/$kver/"
# modules.order keeps the kernel's order among the modules shipped.
grep -xF -f <(printf '%s\n' "${!want[@]}") "$moddir/modules.order" >"$mods/lib/modules/$kver/modules.order" || true
# depmod over just these gives a modules.dep (and modules.alias) that names
# only files that are there.
depmod -b "$mods" "$kver"
# Keep the text files kmodule and modprobe read; drop the binary indexes.
find "$mods/lib/modules/$kver" -maxdepth 1 -type f ! -name modules.dep ! -name modules.builtin ! -name modules.alias -delete
step "  ${#want[@]} modules: $(printf '%s\n' "${!want[@]}" | sed 's|.*/||; s|\.ko.*||' | LC_ALL=C sort | tr '\n' ' ')"

# 3. The initramfs.
image=$out/image
mkdir -p "$image"
cmds=$(sed 's/#.*//' initramfs/commands.txt | tr -s ' \n' ' ')
# The enlist client is built on its own and added as a file: u-root's
# busybox builder takes import paths without a dot ("rackd/...") for the
# standard library's and cannot build this module's packages into bb.
step "building the uinit ($enlist_pkg as /bin/$uinit_name)"
GOOS=linux GOARCH=amd64 GOAMD64=v1 CGO_ENABLED=0 \
	go build -trimpath -ldflags '-s -w -buildid=' -o "$work/$uinit_name" "$enlist_pkg"
step "building the u-root initramfs (about a minute)"
# Fixed mtimes on everything the archive takes from disk.
find "$mods" -exec touch -h -d @0 {} +
cp "$modules_file" "$work/modules"
touch -d @0 "$work/modules" "$work/$uinit_name"
# The extra files are copied first, so their mtimes can be fixed too.
extra_args=()
i=0
for pair in ${extra_files[@]+"${extra_files[@]}"}; do
	i=$((i + 1))
	mkdir -p "$work/extra/$i"
	cp -a "${pair%%:*}" "$work/extra/$i/"
	src=$work/extra/$i/$(basename "${pair%%:*}")
	find "$src" -exec touch -h -d @0 {} +
	extra_args+=(-files "$src:${pair#*:}")
done
# -skip-ldd: u-root would add the libraries of an ELF file from this
# machine's /lib, whatever built it; the caller names them instead.
GOOS=linux GOARCH=amd64 GOAMD64=v1 CGO_ENABLED=0 \
	go tool u-root -o "$work/initramfs.cpio" -skip-ldd \
	-initcmd=init -uinitcmd="/bin/$uinit_name" -defaultsh=gosh \
	-files "$work/$uinit_name:bin/$uinit_name" \
	-files "$mods/lib/modules:lib/modules" \
	-files "$work/modules:$modules_dest" \
	${extra_args[@]+"${extra_args[@]}"} \
	$cmds 2>"$work/u-root.log" || {
	cat "$work/u-root.log" >&2
	die "u-root failed"
}
cp "$work/initramfs.cpio" "$out/initramfs.cpio"
# gzip -n: no name or time stamp in the header.
gzip -n -9 <"$work/initramfs.cpio" >"$image/.initramfs.cpio.gz.tmp"
mv -f "$image/.initramfs.cpio.gz.tmp" "$image/initramfs.cpio.gz"
install -m 0644 "$kroot/boot/vmlinuz-$kver" "$image/vmlinuz"

# 4. The manifest.
entry() { # path role
	printf '    {"path": "%s", "role": "%s", "sha256": "%s", "size": %s}' \
		"$1" "$2" "$(sha256sum "$image/$1" | cut -d' ' -f1)" "$(stat -c %s "$image/$1")"
}
{
	printf '{\n  "name": "%s",\n  "arch": "amd64",\n  "purpose": "enlist",\n' "$image_name"
	# The last console= is /dev/console, where the enlist client's progress
	# lines go: the serial port, which a BMC's serial-over-LAN (or a test)
	# reads; the screen gets the kernel's messages too.
	printf '  "cmdline": "%s",\n  "files": [\n' "$cmdline"
	entry vmlinuz kernel
	printf ',\n'
	entry initramfs.cpio.gz initrd
	printf '\n  ]\n}\n'
} >"$image/rackd-image.json"
printf '%s\n' "$kver" >"$image/KERNEL_VERSION"
step "done: $image ($(du -h "$image/initramfs.cpio.gz" | cut -f1) initramfs, kernel $kver)"
step "  initramfs sha256 $(sha256sum "$image/initramfs.cpio.gz" | cut -c1-16)"
printf '%s\n' "$key" >"$out/source.key"
