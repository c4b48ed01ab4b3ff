// Command kernelinit is the init of the test VM that mounts a seed image
// with the Linux kernel's own vfat driver: it loads the modules under
// /modules in the order /modules/order lists them, mounts each disk that
// kernelinit.disks= names (vda,vdb) read-only and prints one line per file
// ("FILE <disk> <name> <size> <sha256>"), then "DONE", and powers the VM
// off. Any failure prints "FAIL <why>".
package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Printf("FAIL %v\n", err)
	}
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

func run() error {
	for _, d := range []string{"/dev", "/proc", "/sys", "/mnt"} {
		os.MkdirAll(d, 0o755)
	}
	if err := unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, ""); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	order, err := os.Open("/modules/order")
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(order)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		f, err := os.Open(filepath.Join("/modules", name))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load %s: %w", name, err)
		}
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	var disks []string
	for _, arg := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(arg, "kernelinit.disks="); ok {
			disks = strings.Split(v, ",")
		}
	}
	for _, disk := range disks {
		if err := list(disk); err != nil {
			return fmt.Errorf("%s: %w", disk, err)
		}
	}
	fmt.Println("DONE")
	return nil
}

// list mounts /dev/DISK read-only and prints its files.
func list(disk string) error {
	dev := "/dev/" + disk
	// The disk appears once virtio_blk has probed it: wait for it, bounded.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after 60 s", dev)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mnt := "/mnt/" + disk
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, mnt, "vfat", unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount -t vfat %s: %w", dev, err)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(mnt, e.Name()))
		if err != nil {
			return err
		}
		fmt.Printf("FILE %s %s %d %x\n", disk, e.Name(), len(b), sha256.Sum256(b))
	}
	return nil
}
