// Package images is the content-addressed store of boot artefacts (kernels,
// initrds, bootloaders, disk images), and image import.
//
// A Store keeps every blob at <dir>/sha256/<hex>, named by the SHA-256 of
// its content. Writes stream into <dir>/tmp/, are hashed and fsynced, checked
// against the expected size and checksum, and only then renamed into
// sha256/, so a reader never sees a half-written blob. Leftovers in tmp/ are
// removed when the store is opened; a directory must therefore be opened by
// one Store (one process) at a time.
//
// Import reads an image from a Source, a directory (OpenDir), an HTTP(S)
// URL (OpenURL) or a vendor's bare cloud image with its published digest
// (OpenCloudImage), streaming every file straight into the store with its
// size and checksum verified while it is written, and undoes its own additions
// if any file fails: a wrong checksum, a truncated download, an HTTP error,
// a stalled server or a cancelled context all leave the store as it was.
// ImportDir is Import of a directory.
//
// Jobs runs imports in the background as jobs with ids, a bounded number
// at once, whose progress and outcome can be read while they run and after.
//
// # The manifest: rackd-image.json
//
// An image is a directory (or the same layout under a URL) holding
// rackd-image.json and the files it lists:
//
//	{
//	  "name": "noble",               1-64 of [A-Za-z0-9._+-], not starting with '.'
//	  "arch": "amd64",               same characters: amd64, arm64
//	  "purpose": "deploy",           enlist, commission, deploy or bootloader
//	  "cmdline": "console=ttyS0 ro", optional (see below)
//	  "files": [
//	    {"path": "vmlinuz", "role": "kernel", "sha256": "<64 hex>", "size": 12345},
//	    {"path": "initrd.img", "role": "initrd", "sha256": "<64 hex>", "size": 678}
//	  ]
//	}
//
// Each file has its size and a "sha256" (64 lowercase hex digits) or a
// "sha512" (128), or both: every digest given is checked.
//
// Unknown fields are refused, so a manifest written for a newer rackd fails
// loudly rather than losing meaning; every field added later is optional,
// so older manifests keep importing. Paths are clean, relative and
// slash-separated, without "..". Roles are kernel, initrd (loaded in the
// listed order), image, bootloader and disk (see below); sizes are 0 to
// MaxFileSize bytes.
//
// cmdline holds the image's own kernel arguments. rackd boots the image
// with its own arguments first (rackd.url, rackd.mode, rackd.machine and
// a deployment's rackd.image*) and cmdline's after them, so an image can end with "--"
// and arguments for init. It is at most MaxCmdline bytes of words made of
// [A-Za-z0-9._~:/,=+@%-] separated by spaces; rackd.* and initrd= are
// reserved (see CheckCmdline).
//
// A deploy image that carries a disk image (role disk, one file) is
// written to the machine's disk by rackd's own deploy environment: the
// commissioning image's kernel and initrd, booted with rackd.mode=deploy
// and the disk image's path, sha256 and size on the command line. Such an
// image needs no kernel of its own (when it has one, that kernel and its
// initrds boot instead, with the same arguments):
//
//	{"name": "bookworm-raw", "arch": "amd64", "purpose": "deploy",
//	 "files": [{"path": "disk.img", "role": "disk", "sha256": "<64 hex>", "size": 2147483648}]}
//
// # Disk images: raw, compressed, qcow2
//
// A disk file is a raw disk image, or a raw disk image compressed with
// gzip, xz or zstd, or a qcow2 image. Import tells them apart by their
// first bytes (Sniff), never by the file name, and refuses the formats it
// knows it cannot deploy (VMDK, VHD, VHDX, VDI, QED; bzip2, lz4) saying
// what to do. Three optional fields of a disk file say what the manifest
// expects; when given they must agree with what the import finds:
//
//	{"path": "disk.img.zst", "role": "disk", "sha256": "<of the file>", "size": 351272960,
//	 "format": "zstd",                     raw, gzip, xz, zstd or qcow2
//	 "raw_size": 2147483648,               bytes of the raw disk image inside
//	 "raw_sha256": "<of the raw image>"}
//
// A compressed file is stored as it is, the blob that /boot/ serves: the
// deploy environment decompresses while it writes. The import decompresses
// it once, streaming, while it downloads (diskScan; the file becomes a
// blob only once its own digest and the scan are both good), to learn the
// raw size and SHA-256 the boot config passes on
// (rackd.image_format, rackd.image_raw_size, rackd.image_raw_sha256), and
// refuses a truncated or corrupt stream, a stream that holds a qcow2 or
// another container rather than a raw image, one larger than MaxFileSize
// raw, and a zstd window above MaxZstdWindow.
//
// A qcow2 file is converted with qemu-img (Debian's qemu-utils) and stored
// as the zstd of its raw content, after qemu-img info has shown format
// qcow2, no backing file, no external data file and a virtual size of at
// most MaxFileSize (see convertQCOW2 for why zstd). Imported.Files records
// each file as stored: the blob's digest and size, and for a disk its
// format, raw size and raw SHA-256.
//
// An image of purpose bootloader carries the network bootloaders (role
// bootloader) under the names the DHCP server hands out and the loaders
// fetch: pxelinux.0, ldlinux.c32, bootx64.efi, grubx64.efi, grubaa64.efi,
// undionly.kpxe, ipxe.efi, snponly.efi. rackd serves each such file at its
// path in the boot tree; `make bootloaders` builds and imports them.
package images
