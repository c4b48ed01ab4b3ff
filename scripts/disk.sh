# Shell functions for building GPT disk images in a file, without loop
# devices, mounts or grub-install; sourced by scripts/appliance-image.sh.

# le N BYTES: the little-endian bytes of N as printf escapes.
le() {
	local v=$1 n=$2 s="" i
	for ((i = 0; i < n; i++)); do
		s+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255)))
	done
	printf '%s' "$s"
}

# poke FILE OFFSET ESCAPES: write the bytes at OFFSET.
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

# bios_embed IMG BOOT_IMG CORE_IMG BIOS_START: GRUB for legacy BIOS, as
# grub-bios-setup writes it for a core.img embedded in a BIOS boot
# partition starting at sector BIOS_START: boot.img in the first 440 bytes
# (the protective MBR's partition table stays), pointing at core.img's first
# sector, whose block list names the rest of core.img. The partition must
# hold core.img (the caller checks).
bios_embed() {
	local img=$1 boot=$2 core=$3 start=$4 sectors tmp
	sectors=$((($(stat -c %s "$core") + 511) / 512))
	dd if="$boot" of="$img" bs=440 count=1 conv=notrunc status=none
	poke "$img" $((0x5c)) "$(le "$start" 8)" # kernel sector
	poke "$img" $((0x64)) '\xff'             # boot drive: the one the BIOS booted
	poke "$img" $((0x66)) '\x90\x90'         # no drive check: some BIOSes pass a wrong one
	tmp=$(mktemp)
	cp "$core" "$tmp"
	poke "$tmp" 488 "$(le 0 12)" # the list's terminator
	poke "$tmp" 500 "$(le $((start + 1)) 8)$(le $((sectors - 1)) 2)$(le $((0x820)) 2)"
	dd if="$tmp" of="$img" bs=512 seek="$start" conv=notrunc status=none
	rm -f "$tmp"
}
