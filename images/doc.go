// Package images is the content-addressed store of boot artefacts (kernels,
// initrds, bootloaders, disk images); see DESIGN.md section 5.
//
// A Store keeps every blob at <dir>/sha256/<hex>, named by the SHA-256 of
// its content. Writes stream into <dir>/tmp/, are hashed and fsynced, checked
// against the expected size and checksum, and only then renamed into
// sha256/, so a reader never sees a half-written blob. Leftovers in tmp/ are
// removed when the store is opened; a directory must therefore be opened by
// one Store (one process) at a time.
//
// ImportDir imports a directory described by a rackd-image.json manifest,
// verifying every file, and undoes its own additions if any file fails.
package images
