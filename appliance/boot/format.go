package boot

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// DataLabel is the data partition's ext4 label.
const DataLabel = "rackd-data"

// Format makes an ext4 file system labelled DataLabel on dev with the
// mke2fs at mke2fs. -F: dev may be a regular file (tests) and may hold an
// old file system (a factory reset); -E lazy_itable_init=0 is not set,
// so a multi-terabyte disk formats in seconds and the kernel finishes the
// inode tables in the background.
func Format(ctx context.Context, mke2fs, dev string) error {
	cmd := exec.CommandContext(ctx, mke2fs, "-F", "-q", "-t", "ext4", "-L", DataLabel, "-m", "1", dev)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", mke2fs, dev, err, strings.TrimSpace(out.String()))
	}
	return nil
}
