//go:build unix

package appliance

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path (made if missing), waiting for
// another holder, and returns its release. A holder that dies releases it
// with its file descriptors.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
