#!/usr/bin/env bash
# Builds the rack appliance: a disk image to flash, and the signed update
# bundle of the same system.
#
#   DIST/rackd-appliance-<version>-amd64.img      the disk (raw, sparse)
#   DIST/rackd-appliance-<version>-amd64.img.zst  the same, zstd
#   DIST/rackd-appliance-<version>-amd64.bundle   the slot for
#                                                 `rackd appliance update`
#
# The disk (GPT, 512-byte sectors; docs/APPLIANCE.md, "The appliance image"):
#
#   1 bios        1 MiB    GRUB's core.img for legacy BIOS
#   2 esp         64 MiB   FAT "RACKD-ESP": \EFI\BOOT\BOOTX64.EFI (GRUB for
#                          UEFI), \grub\grub.cfg, \grub\grubenv
#   3 rackd-a     SLOT_MB  slot A: the system (squashfs, below)
#   4 rackd-b     SLOT_MB  slot B: a copy of A, so the first update has a
#                          fallback whichever slot it writes
#   5 rackd-data  DATA_MB  zeros: the first boot grows it to the disk's end
#                          and makes it ext4
#
# A slot (squashfs, gzip): /vmlinuz (Debian's kernel), /initrd.img (a u-root
# initramfs, zstd: u-root's init, /bin/rackd-init as its uinit, /bin/rackd,
# /sbin/mke2fs with its libraries, /bin/etcd (Debian's etcd-server), the modules of
# initramfs/appliance-modules.txt), /manifest.json, /bundle.pub (the key
# updates must be signed with), /images/enlist-amd64/ (make initramfs's
# enlistment image) and /images/bootloaders/{amd64,arm64,grub-amd64}/
# (scripts/bootloaders.sh --image), which the appliance imports.
#
# GRUB (from Debian's packages, set up without grub-install, as
# scripts/image-debian.sh does) boots the slot its environment names:
# rackd_good, or rackd_try once when rackd_tries is 1 (it saves
# rackd_tries=0 before booting it, so a try that does not come up is not
# booted again).
#
# Reproducible: the same commit and key give the same .img and .bundle
# (fixed GUIDs, volume ids and times: SOURCE_DATE_EPOCH is the build
# number; mksquashfs -reproducible). make appliance-image-check builds twice
# and compares.
#
# Environment: VERSION (default: git describe, as the Makefile has it),
# APPLIANCE_BUILD (the build number updates are ordered by; default the
# commit's time, git log -1 --format=%ct), DIST (default dist), OUT (the work
# area, default build/appliance), SLOT_MB (320), DATA_MB (8), ZSTD_LEVEL
# (6), APPLIANCE_KEY (the private key bundles are signed with, PKCS#8 PEM;
# default: the development key build/appliance-key/signing.key, made when
# missing) and APPLIANCE_PUB (its public key, PKIX PEM, for the slot;
# default: NAME.pub beside NAME.key, else signing.pub beside it), APPLIANCE_INIT_PKG (the uinit's
# Go package, default ./appliance/cmd/rackd-init), APPLIANCE_RACKD_PKG (the
# Go package built as /bin/rackd, default ./agent/cmd/rackd; tests swap in a
# rackd that fails), APPLIANCE_BUNDLE_ONLY=1 (only the bundle: no disk),
# APPLIANCE_REBUILD=1 (rebuild the initramfs even when its sources did not
# change).
# Run from the repository root (make appliance-image does).
set -euo pipefail

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
build=${APPLIANCE_BUILD:-$(git log -1 --format=%ct 2>/dev/null || true)}
dist=${DIST:-dist}
out=${OUT:-build/appliance}
slot_mb=${SLOT_MB:-320}
data_mb=${DATA_MB:-8}
zlevel=${ZSTD_LEVEL:-6}
init_pkg=${APPLIANCE_INIT_PKG:-./appliance/cmd/rackd-init}
rackd_pkg=${APPLIANCE_RACKD_PKG:-./agent/cmd/rackd}
start=$SECONDS
step() { printf 'appliance-image: [%3ds] %s\n' $((SECONDS - start)) "$*"; }
die() {
	echo "appliance-image: $*" >&2
	exit 1
}

export PATH="$PATH:/usr/sbin:/sbin:/usr/local/go/bin"
for tool in go apt-get dpkg-deb mksquashfs grub-mkimage mkfs.vfat mmd mcopy sfdisk readelf zstd sha256sum; do
	command -v "$tool" >/dev/null || die "$tool not found (make test-deps installs it)"
done
[ -f scripts/initramfs.sh ] || die "run from the repository root"
[[ $build =~ ^[0-9]+$ ]] || die "APPLIANCE_BUILD=$build: want a whole number (the commit time, git log -1 --format=%ct, is the default)"
[[ $slot_mb =~ ^[0-9]+$ ]] && [ "$slot_mb" -ge 64 ] || die "SLOT_MB=$slot_mb: want a whole number of MiB, at least 64"
[[ $data_mb =~ ^[0-9]+$ ]] && [ "$data_mb" -ge 1 ] || die "DATA_MB=$data_mb: want a whole number of MiB"
[[ $version =~ ^[A-Za-z0-9._+~-]+$ ]] || die "VERSION=$version: letters, digits and ._+~- only (it names the files)"
go list "$init_pkg" >/dev/null 2>&1 || die "APPLIANCE_INIT_PKG=$init_pkg is not a Go package of this module"
# Every time stamp the build writes (FAT entries, the archives) is this.
export SOURCE_DATE_EPOCH=$build
export TZ=UTC LC_ALL=C
source scripts/disk.sh

mkdir -p "$out" "$dist"
out=$(cd "$out" && pwd)
dist=$(cd "$dist" && pwd)
cache=$out/cache
work=$out/work
rm -rf "$work"
mkdir -p "$cache/debs" "$work"
trap 'rm -rf "$work"' EXIT
base=rackd-appliance-$version-amd64

# 1. The signing key: a release key, or the development key (made once).
key=${APPLIANCE_KEY:-}
pub=${APPLIANCE_PUB:-}
step "rackd ($rackd_pkg, version $version, build $build)"
ldflags="-s -w -buildid= -X rackd/agent.Version=$version -X rackd/agent/cli.Version=$version"
GOOS=linux GOARCH=amd64 GOAMD64=v1 CGO_ENABLED=0 \
	go build -trimpath -ldflags "$ldflags" -o "$work/rackd" "$rackd_pkg"
# The rackd that signs: this commit's, whatever goes into the slot.
if [ "$rackd_pkg" = ./agent/cmd/rackd ]; then
	tool=$work/rackd
else
	tool=$work/rackd-tool
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tool" ./agent/cmd/rackd
fi
if [ -z "$key" ]; then
	key=build/appliance-key/signing.key
	pub=build/appliance-key/signing.pub
	if [ ! -f "$key" ]; then
		step "making the development signing key build/appliance-key/ (APPLIANCE_KEY names a release key)"
		"$tool" appliance keygen build/appliance-key >/dev/null || die "rackd appliance keygen failed"
	fi
fi
if [ -z "$pub" ]; then
	pub=$(dirname "$key")/signing.pub
	[ -f "${key%.key}.pub" ] && pub=${key%.key}.pub
fi
[ -r "$key" ] || die "APPLIANCE_KEY=$key is not readable"
[ -r "$pub" ] || die "the public key $pub is not readable (APPLIANCE_PUB names it)"

# 2. Debian's packages: GRUB's modules (of the version of the grub-mkimage
# here: an image is made of its tool's kernel and modules), mke2fs with
# the libraries it needs, and etcd (etcd-server: the member rackd runs beside
# itself in a cluster of appliances, docs/SCALE-OUT.md; it needs only libc). Downloaded once into the cache, extracted.
grubver=$(dpkg-query -W -f '${Version}' grub-common 2>/dev/null) || die "grub-common is not installed (make test-deps)"
debs=(grub-pc-bin="$grubver" grub-efi-amd64-bin="$grubver" e2fsprogs libext2fs2 libcom-err2 libblkid1 libuuid1 libc6 etcd-server)
fetch() {
	local want=() p name ver
	for p in "${debs[@]}"; do
		name=${p%%=*} ver=
		[[ $p == *=* ]] && ver=${p#*=}
		compgen -G "$cache/debs/${name}_${ver:+${ver//:/%3a}}*_amd64.deb" >/dev/null || want+=("$p")
	done
	[ ${#want[@]} -eq 0 ] && return 0
	step "downloading ${want[*]}"
	(cd "$cache/debs" && apt-get download "${want[@]}" >/dev/null 2>&1) || {
		apt-get update -qq >/dev/null 2>&1 || true
		(cd "$cache/debs" && apt-get download "${want[@]}" >/dev/null) || die "apt-get download ${want[*]} failed"
	}
}
fetch
root=$work/debs
for p in "${debs[@]}"; do
	name=${p%%=*} ver=
	[[ $p == *=* ]] && ver=${p#*=}
	deb=$(ls "$cache/debs/${name}_${ver:+${ver//:/%3a}}"*_amd64.deb | LC_ALL=C sort -V | tail -n1)
	dpkg-deb -x "$deb" "$root"
done

# 3. mke2fs and etcd and the shared libraries they load (ELF NEEDED, recursively),
# from the packages, at the paths its loader looks in.
step "mke2fs, etcd and their libraries"
stage=$work/mke2fs
mkdir -p "$stage/sbin" "$stage/etc" "$stage/lib/x86_64-linux-gnu" "$stage/lib64"
mke2fs=$root/sbin/mke2fs
[ -f "$mke2fs" ] || mke2fs=$root/usr/sbin/mke2fs
[ -f "$mke2fs" ] || die "e2fsprogs has no mke2fs"
cp -L "$mke2fs" "$stage/sbin/mke2fs"
mkdir -p "$stage/bin"
[ -f "$root/usr/bin/etcd" ] || die "etcd-server has no /usr/bin/etcd"
cp -L "$root/usr/bin/etcd" "$stage/bin/etcd"
cp -L "$root/etc/mke2fs.conf" "$stage/etc/mke2fs.conf"
interp=$(readelf -l "$mke2fs" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[ "$interp" = /lib64/ld-linux-x86-64.so.2 ] || die "mke2fs asks for the loader $interp"
cp -L "$root$interp" "$stage/lib64/ld-linux-x86-64.so.2"
queue=("$mke2fs" "$root/usr/bin/etcd")
declare -A seen=()
while [ ${#queue[@]} -gt 0 ]; do
	f=${queue[0]}
	queue=("${queue[@]:1}")
	for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		[ -n "${seen[$lib]:-}" ] && continue
		seen[$lib]=1
		found=
		for d in lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu; do
			[ -e "$root/$d/$lib" ] && found=$root/$d/$lib && break
		done
		[ -n "$found" ] || die "$f needs $lib, which none of ${debs[*]} has"
		cp -L "$found" "$stage/lib/x86_64-linux-gnu/$lib"
		queue+=("$found")
	done
done
step "  mke2fs $(dpkg-deb -f "$(ls "$cache"/debs/e2fsprogs_*.deb | tail -n1)" Version), libraries: ${!seen[*]}"

# 4. The appliance's initramfs, in two parts. The base (scripts/initramfs.sh
# with its knobs: u-root, rackd-init, the modules, mke2fs) is kept in
# build/appliance-initramfs/ while built from the same sources and files,
# unless APPLIANCE_REBUILD=1 (make appliance-image-check rebuilds it, to
# compare two builds); it holds no rackd, so builds that differ only in
# rackd (another version, another package) share it. The second part is a
# cpio archive of /bin/rackd alone, appended: the kernel unpacks
# concatenated archives in turn.
stale=--if-stale
[ "${APPLIANCE_REBUILD:-}" = 1 ] && stale=
initrd_base=build/appliance-initramfs/$(printf '%s' "$init_pkg" | sha256sum | cut -c1-12)
step "the appliance's initramfs ($init_pkg as /bin/rackd-init; base in $initrd_base)"
OUT=$initrd_base KERNEL_DIR=build/initramfs/kernel ENLIST_PKG=$init_pkg UINIT_NAME=rackd-init \
	IMAGE_NAME=rackd-appliance MODULES_FILE=initramfs/appliance-modules.txt MODULES_DEST=etc/rackd/modules \
	EXTRA_FILES="$stage/sbin/mke2fs:sbin/mke2fs $stage/bin/etcd:bin/etcd $stage/etc/mke2fs.conf:etc/mke2fs.conf $stage/lib/x86_64-linux-gnu:lib/x86_64-linux-gnu $stage/lib64/ld-linux-x86-64.so.2:lib64/ld-linux-x86-64.so.2" \
	bash scripts/initramfs.sh $stale | sed -u 's/^/  /'
# newc_entry NAME MODE SIZE [FILE]: one entry of a cpio archive in the
# "newc" format the kernel unpacks (a header of hexadecimal fields, the
# name, the data, each padded to 4 bytes), owned by root, time 0.
newc_entry() {
	local name=$1 mode=$2 size=$3 file=${4:-} namesize=$((${#1} + 1))
	printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
		1 "$mode" 0 0 1 0 "$size" 0 0 0 0 "$namesize" 0
	printf '%s\0' "$name"
	head -c $(((4 - (110 + namesize) % 4) % 4)) /dev/zero
	if [ -n "$file" ]; then
		cat "$file"
		head -c $(((4 - size % 4) % 4)) /dev/zero
	fi
}
{
	newc_entry bin/rackd $((0100755)) "$(stat -c %s "$work/rackd")" "$work/rackd"
	newc_entry 'TRAILER!!!' 0 0
} >"$work/rackd.cpio"
step "the enlistment image (make initramfs, when stale) and the bootloaders"
bash scripts/initramfs.sh --if-stale | sed -u 's/^/  /'
bash scripts/bootloaders.sh --image --cache build/bootloaders-cache "$work/bootloaders" | sed -u 's/^/  /'

# 5. The slot.
step "the slot (squashfs)"
slot=$work/slot
mkdir -p "$slot/images/enlist-amd64" "$slot/images/bootloaders"
install -m 0644 "$initrd_base/image/vmlinuz" "$slot/vmlinuz"
# The initramfs goes into the slot as zstd rather than gzip: smaller for
# GRUB to read and several times faster for the kernel to unpack, which is
# seconds of every boot on a slow CPU (one thread: the same bytes each build;
# level 9: -19 is 1.5 MiB smaller and takes minutes).
cat "$initrd_base/initramfs.cpio" "$work/rackd.cpio" | zstd -q -9 -T1 -o "$slot/initrd.img"
chmod 0644 "$slot/initrd.img"
install -m 0644 "$pub" "$slot/bundle.pub"
printf '{"version": "%s", "build": %s, "arch": "amd64"}\n' "$version" "$build" >"$slot/manifest.json"
install -m 0644 build/initramfs/image/vmlinuz build/initramfs/image/initramfs.cpio.gz \
	build/initramfs/image/rackd-image.json "$slot/images/enlist-amd64/"
cp -R "$work/bootloaders/." "$slot/images/bootloaders/"
find "$slot" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
# mksquashfs refuses SOURCE_DATE_EPOCH beside its own time options. gzip,
# not xz: most of the slot is compressed already (kernels, initramfs
# images, EFI binaries), where xz spends a minute a build for a few MiB;
# GRUB carries both gzio and xzio: a slot may change compressor without
# its ESP changing.
env -u SOURCE_DATE_EPOCH mksquashfs "$slot" "$work/slot.img" -comp gzip -reproducible -all-root -mkfs-time 0 -all-time 0 \
	-no-xattrs -noappend -no-progress -quiet >/dev/null
slot_bytes=$(stat -c %s "$work/slot.img")
[ "$slot_bytes" -le $((slot_mb << 20)) ] || die "the slot's file system ($((slot_bytes >> 20)) MiB) does not fit SLOT_MB=$slot_mb"
step "  $((slot_bytes >> 20)) MiB of $slot_mb"

# 6. The bundle.
step "the bundle ($(basename "$key"))"
"$tool" appliance bundle --key "$key" --payload "$work/slot.img" --version "$version" --build "$build" \
	--arch amd64 -o "$work/$base.bundle" >/dev/null || die "rackd appliance bundle failed"
if [ "${APPLIANCE_BUNDLE_ONLY:-}" = 1 ]; then
	mv -f "$work/$base.bundle" "$dist/$base.bundle"
	step "done: $dist/$base.bundle $(sha256sum "$dist/$base.bundle" | cut -c1-16)"
	exit 0
fi

# 7. GRUB: both images with every module they need built in, and the
# configuration beside the environment on the ESP. The images find the
# ESP as partition 2 of the disk they were loaded from (BIOS: "(,gpt2)" is
# the boot drive's; UEFI: the device BOOTX64.EFI came from), and the
# configuration the slots as partitions 3 and 4 of the same disk.
step "GRUB for BIOS and UEFI ($grubver)"
mods="part_gpt fat squash4 gzio xzio loadenv search regexp linux normal configfile test echo serial terminal sleep reboot halt"
grub-mkimage -d "$root/usr/lib/grub/i386-pc" -O i386-pc -o "$work/core.img" -p '(,gpt2)/grub' biosdisk $mods
grub-mkimage -d "$root/usr/lib/grub/x86_64-efi" -O x86_64-efi -o "$work/bootx64.efi" -p /grub efi_gop $mods
cat >"$work/grub.cfg" <<'EOF'
# The rackd appliance's boot: which slot, from the GRUB environment beside
# this file (written by the running appliance; GRUB writes rackd_tries and
# rackd_reset back):
#   rackd_good   a|b   the slot known good (anything else: a)
#   rackd_try    a|b   a slot to try once, when rackd_tries is 1
#   rackd_tries  1|0   1: the try was not booted yet (set to 0 as it boots)
#   rackd_reset  1     wipe the data partition at this boot (then cleared)
set timeout=1
set timeout_style=menu
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set rackd_env=$prefix/grubenv
load_env --file $rackd_env --skip-sig rackd_good rackd_try rackd_tries rackd_reset
regexp --set=1:rackd_disk '^([^,]+)' "$root"
set rackd_a=($rackd_disk,gpt3)
set rackd_b=($rackd_disk,gpt4)
if [ "$rackd_good" != b ]; then set rackd_good=a; fi
set rackd_slot=$rackd_good
set rackd_trial=0
if [ "$rackd_tries" = 1 ]; then
	if [ "$rackd_try" = a -o "$rackd_try" = b ]; then
		set rackd_slot=$rackd_try
		set rackd_trial=1
	fi
fi
set rackd_cmdline="console=tty0 console=ttyS0,115200 panic=10 quiet"
export rackd_env rackd_a rackd_b rackd_good rackd_slot rackd_trial rackd_reset rackd_cmdline

# rackd_boot SLOT [ARGS...]: the slot's kernel and initramfs, the slot and
# ARGS on the kernel's command line.
function rackd_boot {
	if [ "$1" = b ]; then set rackd_dev=$rackd_b; else set rackd_dev=$rackd_a; fi
	echo "rackd: slot $1 $2 $3"
	linux $rackd_dev/vmlinuz rackd.slot=$1 $2 $3 $rackd_cmdline
	initrd $rackd_dev/initrd.img
}

menuentry "rackd (slot $rackd_slot)" --id rackd {
	set rackd_args=
	if [ "$rackd_trial" = 1 ]; then
		# The try is booted once: a try that does not come up healthy is
		# not booted again, the next boot is the good slot's.
		set rackd_tries=0
		save_env --file $rackd_env rackd_tries
		if [ "$rackd_slot" = b ]; then set rackd_dev=$rackd_b; else set rackd_dev=$rackd_a; fi
		if [ -f $rackd_dev/vmlinuz ]; then
			set rackd_args=rackd.trial=1
		else
			echo "rackd: slot $rackd_slot has no system; booting slot $rackd_good"
			set rackd_slot=$rackd_good
		fi
	fi
	set rackd_reset_arg=
	if [ "$rackd_reset" = 1 ]; then
		set rackd_reset=
		save_env --file $rackd_env rackd_reset
		set rackd_reset_arg=rackd.factory_reset=1
	fi
	rackd_boot $rackd_slot $rackd_args $rackd_reset_arg
}
menuentry "rackd slot A" --id rackd-a {
	rackd_boot a
}
menuentry "rackd slot B" --id rackd-b {
	rackd_boot b
}
menuentry "rackd: factory reset (erases the data partition)" --id rackd-reset {
	rackd_boot $rackd_good rackd.factory_reset=1
}
EOF
# grubenv: GRUB's format, exactly 1024 bytes ('#' pads it).
{
	printf '# GRUB Environment Block\nrackd_good=a\nrackd_try=\nrackd_tries=0\nrackd_reset=\n'
} >"$work/grubenv"
pad=$((1024 - $(stat -c %s "$work/grubenv")))
head -c "$pad" /dev/zero | tr '\0' '#' >>"$work/grubenv"
[ "$(stat -c %s "$work/grubenv")" -eq 1024 ] || die "grubenv is not 1024 bytes"

# 8. The disk, without a loop device: the file systems made as files and
# copied in at their partitions' offsets.
step "the disk"
sector=512
bios_start=2048 bios_size=2048
esp_start=4096 esp_size=131072
slot_size=$((slot_mb * 2048))
a_start=$((esp_start + esp_size))
b_start=$((a_start + slot_size))
data_start=$((b_start + slot_size))
data_size=$((data_mb * 2048))
total=$((data_start + data_size + 2048)) # the last MiB: the backup GPT
core_sectors=$((($(stat -c %s "$work/core.img") + sector - 1) / sector))
[ "$core_sectors" -le "$bios_size" ] || die "core.img ($core_sectors sectors) does not fit the BIOS boot partition"

touch -d "@$build" "$work/bootx64.efi" "$work/grub.cfg" "$work/grubenv"
mkfs.vfat --invariant -C -i 52414B44 -n RACKD-ESP "$work/esp.img" $((esp_size / 2)) >/dev/null
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT ::/grub
mcopy -m -i "$work/esp.img" "$work/bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI
mcopy -m -i "$work/esp.img" "$work/grub.cfg" ::/grub/grub.cfg
mcopy -m -i "$work/esp.img" "$work/grubenv" ::/grub/grubenv

img=$work/$base.img
truncate -s $((total * sector)) "$img"
# Fixed GUIDs: the same build gives the same disk. Partition types: BIOS
# boot, EFI system, Linux file system.
sfdisk --quiet --no-reread --no-tell-kernel "$img" >/dev/null <<EOF
label: gpt
label-id: 5241434B-4400-4000-8000-000000000000
unit: sectors
first-lba: 2048
start=$bios_start, size=$bios_size, type=21686148-6449-6E6F-744E-656564454649, uuid=5241434B-4400-4000-8000-000000000001, name="bios"
start=$esp_start, size=$esp_size, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=5241434B-4400-4000-8000-000000000002, name="esp"
start=$a_start, size=$slot_size, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=5241434B-4400-4000-8000-00000000000A, name="rackd-a"
start=$b_start, size=$slot_size, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=5241434B-4400-4000-8000-00000000000B, name="rackd-b"
start=$data_start, size=$data_size, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=5241434B-4400-4000-8000-0000000000DA, name="rackd-data"
EOF
dd if="$work/esp.img" of="$img" bs=1M seek=$((esp_start / 2048)) conv=notrunc,sparse status=none
dd if="$work/slot.img" of="$img" bs=1M seek=$((a_start / 2048)) conv=notrunc,sparse status=none
dd if="$work/slot.img" of="$img" bs=1M seek=$((b_start / 2048)) conv=notrunc,sparse status=none
bios_embed "$img" "$root/usr/lib/grub/i386-pc/boot.img" "$work/core.img" "$bios_start"
sfdisk --verify "$img" >/dev/null || die "sfdisk --verify $img failed"

step "zstd -$zlevel"
zstd -q -T0 -"$zlevel" -f -o "$work/$base.img.zst" "$work/$base.img"
for f in "$base.img" "$base.img.zst" "$base.bundle"; do
	mv -f "$work/$f" "$dist/$f"
done
step "done: $dist/$base.{img,img.zst,bundle}"
step "  img $(($(stat -c %s "$dist/$base.img") >> 20)) MiB $(sha256sum "$dist/$base.img" | cut -c1-16), zst $(($(stat -c %s "$dist/$base.img.zst") >> 20)) MiB, bundle $(($(stat -c %s "$dist/$base.bundle") >> 20)) MiB $(sha256sum "$dist/$base.bundle" | cut -c1-16)"
