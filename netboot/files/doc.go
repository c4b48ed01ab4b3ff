// Package files is the boot file tree as rackd's TFTP and HTTP boot servers
// see it: a Source that opens a File by the name a client asked for.
//
// Three pieces compose:
//
//   - Clean is the one name sanitiser both servers rely on. It strips one
//     leading "/" (TFTP clients and firmware often send "/pxelinux.0"),
//     and refuses NUL bytes, control characters, backslashes, invalid
//     UTF-8, names longer than MaxNameLen bytes, absolute names, "."
//     and empty elements, and any ".." element.
//   - Tree serves a directory through an os.Root (Go 1.24+), which refuses
//     by construction every path that would resolve outside the directory,
//     symlinks included, so the sanitiser is not the only line of defence:
//     a symlink inside the tree that points out is refused by os.Root's own
//     walk (openat with O_NOFOLLOW, one element at a time), not by string
//     checks.
//   - Overlay consults a Renderer first, so that per-machine boot configs
//     (grub.cfg-<mac>, pxelinux.cfg/01-<mac>, iPXE scripts) come from memory
//     on every request and are never written to disk, and falls back to
//     the tree for everything else.
//
// Errors are *Error values that say which of three things happened, for the
// servers to answer correctly: ErrNotFound (TFTP "File not found", HTTP
// 404), ErrRefused (a name that tries to leave the tree: TFTP "Access
// violation", HTTP 403) and ErrInvalid (a malformed name, also refused:
// HTTP 400). errors.Is(err, ErrRefused) holds for invalid names too.
package files
