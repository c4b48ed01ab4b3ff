//go:build !unix

package files

import (
	"io/fs"
	"os"
)

// openFlags: no O_NONBLOCK here; rackd serves from Linux, and this file
// only keeps the package building (and vet clean) elsewhere.
const openFlags = os.O_RDONLY

// fileID is unknown off Unix; the ETag then rests on size and mtime.
func fileID(fs.FileInfo) uint64 { return 0 }
