package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"rackd/agent/client"
)

// writeBackup streams the server's database into file through file.tmp:
// written, fsynced, closed, renamed, and the directory fsynced so that the
// rename survives a power cut. Until the rename, file is untouched; on any
// error before it, file.tmp is removed.
func writeBackup(ctx context.Context, c *client.Client, file string) (n int64, err error) {
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("backup: %s is a directory; give a file name", file)
	}
	tmp := file + ".tmp"
	// O_EXCL: a second backup to the same file at the same time must not
	// write into our temporary file, nor we into its. 0600 because the
	// database holds hashed tokens and BMC credentials.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return 0, fmt.Errorf("backup: %s exists: another backup may be running (remove it if not)", tmp)
		}
		return 0, fmt.Errorf("backup: %w", err)
	}
	closed, renamed := false, false
	defer func() {
		if err == nil || renamed {
			return
		}
		if !closed {
			f.Close()
		}
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", tmp, rmErr))
		}
	}()

	if n, err = c.Backup(ctx, f); err != nil {
		return 0, err
	}
	if err = f.Sync(); err != nil {
		return 0, fmt.Errorf("backup: syncing %s: %w", tmp, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return 0, fmt.Errorf("backup: closing %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, file); err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	renamed = true
	// From here on file is complete, so an error must not remove anything.
	if dirErr := syncDir(filepath.Dir(file)); dirErr != nil {
		return n, fmt.Errorf("backup: %s is complete, but syncing its directory failed (it may not survive a power cut): %w", file, dirErr)
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
