//go:build unix

package files

import (
	"io/fs"
	"os"
	"syscall"
)

// openFlags opens without blocking: opening a FIFO for reading would
// otherwise wait for a writer. Reads of regular files ignore O_NONBLOCK.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK

// fileID is the inode number, part of the ETag.
func fileID(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
