#!/usr/bin/env bash
# Builds a bootable Debian 12 (bookworm) amd64 disk image from Debian's
# packages, as deploy image directories that `rackd images import DIR` takes:
#
#   OUT/image-debian/           image debian-12: debian-12.img.zst (zstd)
#   OUT/image-debian-raw/       image debian-12-raw: debian-12.img (raw, sparse)
#   OUT/image-debian-nocloud/   debian-12-nocloud(-raw): the same tree with
#   OUT/image-debian-nocloud-raw/   cloud-init disabled (an OS that never
#                               reports that it booted; for tests)
#
# The disk: GPT with a BIOS boot partition (GRUB's core.img), an EFI system
# partition (GRUB as \EFI\BOOT\BOOTX64.EFI) and an ext4 root that
# cloud-init's growpart grows to the disk (or up to a partition placed after
# it). GRUB is set up without loop devices and without grub-install: the
# images are made from the tree's own GRUB with grub-mkimage, and the boot
# sector's pointers are written as grub-bios-setup writes them. The kernel
# and GRUB talk on the screen and on the first serial port (115200 8n1).
# Inside: the kernel, systemd, ifupdown with resolvconf, OpenSSH's server,
# sudo and cloud-init (stock configuration: the default user is "debian";
# identity, keys and network come from a NoCloud seed). No documentation,
# manual pages or translations (dpkg path excludes, kept in the image).
#
# Results are cached under CACHE (default /var/cache/rackd-test/image-debian)
# keyed by this script's content: a second run links them in seconds.
#
# Environment: OUT (default build), CACHE, SUITE (bookworm), IMAGE_MB (raw
# size, default 1280), ZSTD_LEVEL (default 6), MIRROR (default: mmdebstrap's),
# IMAGE_NAME (default debian-12), IMAGE_XZ=1 (also OUT/image-debian-xz, the
# raw image xz-compressed at XZ_LEVEL, default 3; for the benchmark). Needs root, mmdebstrap, sfdisk,
# mkfs.ext4, mkfs.vfat, mtools and zstd (scripts/test-deps.sh installs them).
set -euo pipefail

script=$(readlink -f "${BASH_SOURCE[0]}")
out=${OUT:-build}
cache=${CACHE:-/var/cache/rackd-test/image-debian}
suite=${SUITE:-bookworm}
image_mb=${IMAGE_MB:-1280}
zlevel=${ZSTD_LEVEL:-6}
xzlevel=${XZ_LEVEL:-3}
name=${IMAGE_NAME:-debian-12}
start=$SECONDS
step() { printf 'image-debian: [%3ds] %s\n' $((SECONDS - start)) "$*"; }
die() {
	echo "image-debian: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap's root mode, device files in the tree)"
for tool in mmdebstrap sfdisk mkfs.ext4 mkfs.vfat mmd mcopy zstd sha256sum flock; do
	command -v "$tool" >/dev/null || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null ||
		die "$tool not found (make test-deps installs it)"
done
export PATH="$PATH:/usr/sbin:/sbin"
[[ $image_mb =~ ^[0-9]+$ ]] && [ "$image_mb" -ge 768 ] || die "IMAGE_MB=$image_mb: want a whole number of MiB, at least 768"

# The key: this script and the knobs that change its result.
key=$( (
	cat "$script"
	printf '%s\n' "$suite" "$image_mb" "$zlevel" "$name" "${MIRROR:-}"
) | sha256sum | cut -c1-16)
mkdir -p "$cache" "$out"
out=$(cd "$out" && pwd)
exec 9>"$cache/lock"
if ! flock -n 9; then
	step "waiting for another build of the image (lock $cache/lock)"
	flock 9
fi
done_dir=$cache/$key

# publish DIR FILE: an image directory holding FILE (a link to the cached
# file when the file systems allow it) and its manifest.
publish() {
	local dir=$1 file=$2 manifest=$3
	# Already there (the same file, linked, and the same manifest): left
	# alone, so that a reader of it (a test importing it while another
	# runs make image-debian) never sees it go away for the swap below.
	if [ "$file" -ef "$dir/$(basename "$file")" ] && cmp -s "$manifest" "$dir/rackd-image.json"; then
		return 0
	fi
	rm -rf "$dir.tmp"
	mkdir -p "$dir.tmp"
	ln "$file" "$dir.tmp/" 2>/dev/null || cp --sparse=always "$file" "$dir.tmp/"
	cp "$manifest" "$dir.tmp/rackd-image.json"
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
}
publish_all() {
	publish "$out/image-debian" "$done_dir/$name.img.zst" "$done_dir/zst.json"
	publish "$out/image-debian-raw" "$done_dir/$name.img" "$done_dir/raw.json"
	publish "$out/image-debian-nocloud" "$done_dir/nocloud/$name-nocloud.img.zst" "$done_dir/nocloud/zst.json"
	publish "$out/image-debian-nocloud-raw" "$done_dir/nocloud/$name-nocloud.img" "$done_dir/nocloud/raw.json"
	if [ "${IMAGE_XZ:-}" = 1 ]; then
		if [ ! -f "$done_dir/xz.json" ]; then
			step "xz -T0 -$xzlevel (IMAGE_XZ=1)"
			xz -T0 -"$xzlevel" -k -f "$done_dir/$name.img"
			read -r raw_sha raw_size _ <"$done_dir/SUMS"
			manifest "$done_dir/$name.img.xz" "$name-xz" xz "$raw_size" "$raw_sha" >"$done_dir/xz.json.tmp"
			mv "$done_dir/xz.json.tmp" "$done_dir/xz.json"
			step "  xz $(($(stat -c %s "$done_dir/$name.img.xz") >> 20)) MiB"
		fi
		publish "$out/image-debian-xz" "$done_dir/$name.img.xz" "$done_dir/xz.json"
	fi
	step "done: $out/image-debian{,-raw,-nocloud,-nocloud-raw} ($(cat "$done_dir/SUMMARY"))"
}

# manifest FILE NAME [FORMAT RAW_SIZE RAW_SHA256]: a deploy image's
# manifest for the disk file FILE.
manifest() {
	local path=$1 nm=$2 format=${3:-} sha size
	sha=$(sha256sum "$path" | cut -d' ' -f1)
	size=$(stat -c %s "$path")
	printf '{\n  "name": "%s",\n  "arch": "amd64",\n  "purpose": "deploy",\n  "files": [\n' "$nm"
	printf '    {"path": "%s", "role": "disk", "sha256": "%s", "size": %s' "$(basename "$path")" "$sha" "$size"
	if [ -n "$format" ]; then
		printf ',\n     "format": "%s", "raw_size": %s, "raw_sha256": "%s"' "$format" "$4" "$5"
	fi
	printf '}\n  ]\n}\n'
}

if [ -f "$done_dir/.done" ]; then
	step "cached build $key"
	publish_all
	exit 0
fi

work=$(mktemp -d "$cache/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
root_uuid=$(cat /proc/sys/kernel/random/uuid)
esp_id=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ' | tr a-f A-F)
esp_uuid=${esp_id:0:4}-${esp_id:4:4}

# 1. The tree. The .debs are kept in CACHE/debs between builds (sync-in
# and sync-out are mmdebstrap's hook commands; nothing of the build host's
# is left in the tree). The initramfs is made once, at the end, instead of
# at the kernel's installation and again for every package with a hook
# (minutes each on a busy machine): update-initramfs is diverted to a no-op
# meanwhile.
mkdir -p "$cache/debs"
step "mmdebstrap $suite into the tree (about a minute and a half the first time)"
packages=linux-image-amd64,systemd-sysv,udev,dbus,kmod,e2fsprogs,fdisk,procps,iproute2,netbase,
packages+=ifupdown,isc-dhcp-client,resolvconf,openssh-server,sudo,cloud-init,cloud-guest-utils,
packages+=grub-pc,grub-efi-amd64-bin,less
mirror=()
[ -n "${MIRROR:-}" ] && mirror=("$MIRROR")
mmdebstrap --variant=minbase --include="$packages" \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--skip=download/empty \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
	--setup-hook="sync-in $cache/debs /var/cache/apt/archives/" \
	--essential-hook="printf 'UUID=%s / ext4 errors=remount-ro 0 1\nUUID=%s /boot/efi vfat umask=0077,nofail 0 2\n' $root_uuid $esp_uuid >\"\$1/etc/fstab\"" \
	--essential-hook='mkdir -p "$1"/etc/initramfs-tools/conf.d "$1"/boot/efi && echo FSTYPE=ext4 >"$1"/etc/initramfs-tools/conf.d/fstype' \
	--essential-hook='printf "grub-pc grub-pc/install_devices_empty boolean true\ngrub-pc grub-pc/install_devices multiselect\n" | chroot "$1" debconf-set-selections' \
	--essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs && printf "#!/bin/sh\nexit 0\n" >"$1"/usr/sbin/update-initramfs && chmod 755 "$1"/usr/sbin/update-initramfs' \
	--customize-hook='rm -f "$1"/usr/sbin/update-initramfs && chroot "$1" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs' \
	--customize-hook='chroot "$1" update-initramfs -c -k all' \
	--customize-hook="sync-out /var/cache/apt/archives $cache/debs" \
	--customize-hook="for f in $cache/debs/*.deb; do [ -e \"\$1/var/cache/apt/archives/\${f##*/}\" ] || rm -f \"\$f\"; done" \
	--customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
	"$suite" "$tree" "${mirror[@]}" 2>&1 | tee "$work/mmdebstrap.log" |
	{ grep --line-buffered -E '^I: (downloading|extracting|installing|running --customize-hook|cleaning|success)' || true; } |
	sed -u 's/^I: /  mmdebstrap: /' || {
	tail -n 40 "$work/mmdebstrap.log" >&2
	die "mmdebstrap failed (log above)"
}
step "  tree $(du -sh "$tree" | cut -f1)"

# 2. What the image is, not what the build host was.
step "configuring the tree"
kver=$(basename "$(ls -d "$tree"/lib/modules/*/ | head -n1)")
[ -f "$tree/boot/vmlinuz-$kver" ] && [ -f "$tree/boot/initrd.img-$kver" ] || die "no kernel or initramfs in the tree"
echo localhost >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' >"$tree/etc/hosts"
rm -f "$tree/etc/resolv.conf" "$tree/etc/resolvconf/resolv.conf.d/original"
# resolvconf owns /etc/resolv.conf.
ln -s ../run/resolvconf/resolv.conf "$tree/etc/resolv.conf"
rm -f "$tree"/etc/ssh/ssh_host_*
: >"$tree/etc/machine-id"
rm -f "$tree/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$tree/var/lib/dbus/machine-id"
# Debian's locale-gen knows no en_US.UTF-8 without the locales package;
# C.UTF-8 is built into the C library.
echo LANG=C.UTF-8 >"$tree/etc/default/locale"
grep -q '^source /etc/network/interfaces.d/\*' "$tree/etc/network/interfaces" 2>/dev/null ||
	printf 'source /etc/network/interfaces.d/*\n\nauto lo\niface lo inet loopback\n' >"$tree/etc/network/interfaces"
cmdline="console=tty0 console=ttyS0,115200n8"
mkdir -p "$tree/etc/default/grub.d"
# What update-grub (run by a kernel upgrade inside the OS) writes.
cat >"$tree/etc/default/grub.d/serial.cfg" <<EOF
GRUB_TIMEOUT=1
GRUB_CMDLINE_LINUX="$cmdline"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
EOF
rm -f "$tree"/boot/*.dpkg-bak
rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin "$tree"/var/cache/debconf/*-old \
	"$tree"/var/log/*.log "$tree"/var/log/apt/* "$tree"/tmp/* "$tree"/var/tmp/* "$tree"/root/.bash_history

# 3. GRUB: modules where grub-install puts them, a configuration, and the
# two boot images made by the tree's own grub-mkimage.
step "GRUB for BIOS and UEFI"
for plat in i386-pc x86_64-efi; do
	mkdir -p "$tree/boot/grub/$plat"
	cp "$tree/usr/lib/grub/$plat"/*.mod "$tree/usr/lib/grub/$plat"/*.lst "$tree/boot/grub/$plat/"
done
cat >"$tree/boot/grub/grub.cfg" <<EOF
set default=0
set timeout=1
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
insmod part_gpt
insmod ext2
search --no-floppy --fs-uuid --set=root $root_uuid
menuentry 'Debian GNU/Linux 12' {
	linux /vmlinuz root=UUID=$root_uuid ro $cmdline
	initrd /initrd.img
}
EOF
printf 'search.fs_uuid %s root\nset prefix=($root)/boot/grub\n' "$root_uuid" >"$tree/tmp/early.cfg"
chroot "$tree" grub-mkimage -O i386-pc -o /tmp/core.img -c /tmp/early.cfg -p /boot/grub \
	biosdisk part_gpt ext2 search_fs_uuid
chroot "$tree" grub-mkimage -O x86_64-efi -o /tmp/bootx64.efi -c /tmp/early.cfg -p /boot/grub \
	part_gpt ext2 fat search_fs_uuid
mv "$tree/tmp/core.img" "$tree/tmp/bootx64.efi" "$work/"
cp "$tree/usr/lib/grub/i386-pc/boot.img" "$work/boot.img"
rm -f "$tree/tmp/early.cfg"

# 4. The disk, without a loop device: partitions laid out on the file, the
# file systems made as files and copied in.
sector=512
total=$((image_mb * 2048))
bios_start=2048 bios_size=2048
esp_start=4096 esp_size=65536
root_start=$((esp_start + esp_size))
root_size=$((total - root_start - 2048)) # the last MiB: the backup GPT
core_sectors=$((($(stat -c %s "$work/core.img") + sector - 1) / sector))
[ "$core_sectors" -le "$bios_size" ] || die "core.img ($core_sectors sectors) does not fit the BIOS boot partition"

step "ESP: \\EFI\\BOOT\\BOOTX64.EFI"
mkfs.vfat -C -i "$esp_id" -n EFI "$work/esp.img" $((esp_size / 2)) >/dev/null
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$work/esp.img" "$work/bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI

features=^metadata_csum_seed
# GRUB 2.06 cannot read orphan_file (e2fsprogs 1.47 may make it by default).
if mke2fs -V 2>&1 | grep -qE 'mke2fs 1\.(4[7-9]|[5-9][0-9])'; then
	features+=,^orphan_file
fi

# LE N BYTES: the little-endian bytes of N as printf escapes.
le() {
	local v=$1 n=$2 s="" i
	for ((i = 0; i < n; i++)); do
		s+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255)))
	done
	printf '%s' "$s"
}
# poke FILE OFFSET ESCAPES: write the bytes at OFFSET.
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

# disk FILE: the whole disk from the tree as it is now.
disk() {
	local img=$1
	rm -f "$img" "$work/root.img"
	truncate -s $((root_size * sector)) "$work/root.img"
	mkfs.ext4 -q -F -L root -U "$root_uuid" -O "$features" -m 1 -d "$tree" "$work/root.img"
	truncate -s $((total * sector)) "$img"
	sfdisk --quiet --no-reread --no-tell-kernel "$img" >/dev/null <<EOF
label: gpt
unit: sectors
first-lba: 2048
start=$bios_start, size=$bios_size, type=21686148-6449-6E6F-744E-656564454649, name="bios"
start=$esp_start, size=$esp_size, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=$root_start, size=$root_size, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name="root"
EOF
	dd if="$work/esp.img" of="$img" bs=1M seek=$((esp_start / 2048)) conv=notrunc,sparse status=none
	dd if="$work/root.img" of="$img" bs=1M seek=$((root_start / 2048)) conv=notrunc,sparse status=none
	rm -f "$work/root.img"
	# BIOS: GRUB's boot.img in the first 440 bytes (the protective MBR's
	# partition table stays), pointing at core.img in the BIOS boot
	# partition, whose first sector's block list names the rest of it
	# (grub-bios-setup's work for an embedded core.img).
	dd if="$work/boot.img" of="$img" bs=440 count=1 conv=notrunc status=none
	poke "$img" $((0x5c)) "$(le $bios_start 8)" # kernel sector
	poke "$img" $((0x64)) '\xff'                # boot drive: the one the BIOS booted
	poke "$img" $((0x66)) '\x90\x90'            # no drive check: some BIOSes pass a wrong one
	cp "$work/core.img" "$work/core.patched"
	poke "$work/core.patched" 488 "$(le 0 12)" # the list's terminator
	poke "$work/core.patched" 500 "$(le $((bios_start + 1)) 8)$(le $((core_sectors - 1)) 2)$(le $((0x820)) 2)"
	dd if="$work/core.patched" of="$img" bs=$sector seek=$bios_start conv=notrunc status=none
	sfdisk --verify "$img" >/dev/null || die "sfdisk --verify $img failed"
}

mkdir -p "$work/result/nocloud"
build_variant() { # IMG NAME
	local img=$1 nm=$2 dir raw_sha raw_size zsize
	dir=$(dirname "$img")
	step "disk $nm: ext4 root, partitions, boot sectors"
	disk "$img"
	step "  sha256 and zstd -$zlevel"
	raw_sha=$(sha256sum "$img" | cut -d' ' -f1)
	raw_size=$(stat -c %s "$img")
	zstd -q -T0 -"$zlevel" -f -o "$img.zst" "$img"
	zsize=$(stat -c %s "$img.zst")
	manifest "$img" "$nm-raw" >"$dir/raw.json"
	manifest "$img.zst" "$nm" zstd "$raw_size" "$raw_sha" >"$dir/zst.json"
	printf '%s %s %s\n' "$raw_sha" "$raw_size" "$zsize" >"$dir/SUMS"
	step "  $nm: raw $((raw_size >> 20)) MiB ($(du -m "$img" | cut -f1) MiB allocated), zstd $((zsize >> 20)) MiB"
}
build_variant "$work/result/$name.img" "$name"
# The same tree with cloud-init disabled: an OS that never reports.
touch "$tree/etc/cloud/cloud-init.disabled"
build_variant "$work/result/nocloud/$name-nocloud.img" "$name-nocloud"
read -r _ raw_size zsize <"$work/result/SUMS"
printf 'raw %d MiB, zstd %d MiB, kernel %s, built in %ds' $((raw_size >> 20)) $((zsize >> 20)) "$kver" $((SECONDS - start)) >"$work/result/SUMMARY"
cp "$work/mmdebstrap.log" "$work/result/"
(cd "$tree" && chroot . dpkg-query -W -f '${Package} ${Version}\n') >"$work/result/packages.txt"
touch "$work/result/.done"
rm -rf "$done_dir"
mv "$work/result" "$done_dir"
# Older builds' results go: one build is kept.
for d in "$cache"/*/; do
	d=${d%/}
	[ "$d" = "$done_dir" ] || [ "$(basename "$d")" = debs ] || rm -rf "$d"
done
publish_all
