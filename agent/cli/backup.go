package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"rackd/agent/client"
	"rackd/internal/atomicfile"
)

// writeBackup streams the server's database into file through file.tmp:
// written, fsynced, closed, renamed, and the directory fsynced so that the
// rename survives a power cut. Until the rename, file is untouched; on any
// error before it, file.tmp is removed.
func writeBackup(ctx context.Context, c *client.Client, file string) (n int64, err error) {
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("backup: %s is a directory; give a file name", file)
	}
	// A fixed temporary name, created exclusively: a second backup to the
	// same file at the same time must not write into our temporary file,
	// nor we into its. 0600 because the database holds hashed tokens and
	// BMC credentials.
	tmp := filepath.Base(file) + ".tmp"
	f, err := atomicfile.Create(file, atomicfile.Options{Perm: 0o600, TempName: tmp})
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return 0, fmt.Errorf("backup: %s exists: another backup may be running (remove it if not)", file+".tmp")
		}
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer func() {
		if rmErr := f.Abort(); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("backup: %w", rmErr))
		}
	}()
	if n, err = c.Backup(ctx, f); err != nil {
		return 0, err
	}
	// A failure after the rename says that file is complete (ErrDirSync);
	// nothing is removed then.
	if err = f.Commit(); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	return n, nil
}
