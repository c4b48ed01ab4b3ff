package bootconf

import (
	"context"
	"fmt"
	"strconv"
)

// MachineInfo is what the store knows about a machine, as far as booting
// is concerned.
type MachineInfo struct {
	// ID is the machine's store ID, passed to the environment as
	// rackd.machine=<ID>.
	ID string
	// Hostname is shown in comments, menu titles and messages.
	Hostname string
	// State is the lifecycle state as the API spells it ("DEPLOYING").
	State string
	// Arch is the machine's architecture ("amd64", "arm64"); empty means
	// amd64, the store's default.
	Arch string
	// Image is the name of the image to deploy; it matters only while the
	// machine is DEPLOYING.
	Image string
	// Erase is set while the machine is RELEASING with an erase: it boots
	// the commissioning environment in erase mode.
	Erase bool
	// DiskWritten is set while the machine is DEPLOYING and its deploy
	// environment has written the image: it boots that image from its
	// disk while rackd waits for the OS to report.
	DiskWritten bool
}

// Environment is a bootable kernel with its initrds and arguments. Paths
// are relative to the boot tree that TFTP and HTTP /boot/ serve.
type Environment struct {
	// Kernel is the kernel's path, e.g. "images/3f2a…/vmlinuz". Empty
	// means the environment is not imported.
	Kernel string
	// Initrds are the initrd paths, loaded in order (the kernel
	// concatenates them, so microcode comes first).
	Initrds []string
	// Args are the environment's own kernel command-line arguments, one
	// word each ("console=ttyS0,115200"), rendered after rackd's (see
	// Decision.Cmdline). Quoted values with spaces are not supported, and
	// rackd.* and initrd= are refused: see the package documentation.
	Args []string
	// Disk, for a deploy environment, is the disk image it writes:
	// rendered as rackd.image=<path>, rackd.image_sha256=<hex> and
	// rackd.image_size=<bytes> (of the file served), and for a compressed
	// image rackd.image_format=<format>, rackd.image_raw_size=<bytes> and
	// rackd.image_raw_sha256=<hex> (of the decompressed disk), and
	// rackd.image_chunks=<hex> when the image has a chunk list, after
	// rackd's other arguments.
	Disk *DiskImage
}

// DiskImage is a disk image in the boot tree: a raw disk image, or one
// compressed with gzip, xz or zstd that the environment decompresses while
// it writes.
type DiskImage struct {
	// Path is relative to the boot tree ("images/<sha256>"); the
	// environment fetches <rackd.url>/boot/<Path>.
	Path string
	// SHA256 and Size are of the file served.
	SHA256 string
	Size   int64
	// Format is FormatRaw (or empty, the same) or the compression of the
	// file: FormatGzip, FormatXZ or FormatZstd.
	Format string
	// RawSize and RawSHA256 are of the decompressed disk image: RawSize
	// is required when the file is compressed (the environment picks a
	// disk it fits on before it writes), RawSHA256 optional. Both are
	// ignored for a raw image, whose raw bytes are the file's.
	RawSize   int64
	RawSHA256 string
	// Chunks, when set, is the SHA-256 of the image's chunk list: the
	// digest of each chunk of the decompressed image, a blob served next
	// to the image (the same directory of the boot tree, named by this
	// digest), which the environment fetches, checks against this
	// digest and verifies the image with, chunk by chunk in parallel,
	// instead of hashing the whole stream. Empty for images imported
	// before chunk lists existed.
	Chunks string
}

// The formats of a DiskImage, spelled as rackd.image_format= spells them.
const (
	FormatRaw  = "raw"
	FormatGzip = "gzip"
	FormatXZ   = "xz"
	FormatZstd = "zstd"
)

// Compressed reports whether the image's file is compressed.
func (im DiskImage) Compressed() bool { return im.Format != "" && im.Format != FormatRaw }

// Available reports whether the environment is imported and can boot.
func (e Environment) Available() bool { return e.Kernel != "" }

// Environments are the bootable environments of one architecture, by
// purpose. A zero Environment (or a missing deploy image) means "not
// imported yet".
type Environments struct {
	// Enlist boots unknown machines: the enlistment initramfs.
	Enlist Environment
	// Commission boots COMMISSIONING machines.
	Commission Environment
	// Deploy holds the deploy environments by image name.
	Deploy map[string]Environment
}

// Source is what rendering needs from the rest of rackd; the agent
// implements it over the store and the images registry. It is read on every
// request and must answer from memory quickly: firmware gives up on a slow
// per-MAC config and falls back to the default one.
type Source interface {
	// Machine returns the machine owning mac (lower-case colon form), and
	// false when no machine has it.
	Machine(ctx context.Context, mac string) (MachineInfo, bool, error)
	// Environments returns the environments imported for arch.
	Environments(ctx context.Context, arch string) (Environments, error)
}

// Mode is what a machine boots.
type Mode string

// The modes. Enlist, commission and deploy boot a kernel and are passed to
// it as rackd.mode=<mode>; local boots from the machine's own disk.
const (
	ModeEnlist     Mode = "enlist"
	ModeCommission Mode = "commission"
	ModeDeploy     Mode = "deploy"
	ModeLocal      Mode = "local"
	// ModeErase boots the commissioning environment to erase the disks
	// of a machine being released.
	ModeErase Mode = "erase"
)

// Lifecycle states that boot something other than the local disk, or
// whose local disk holds the system rackd deployed, as the store spells
// them (store.State; this package does not import store so that
// dependencies keep pointing inwards).
const (
	stateCommissioning = "COMMISSIONING"
	stateDeploying     = "DEPLOYING"
	stateDeployed      = "DEPLOYED"
	stateReleasing     = "RELEASING"
)

// Decision is what a machine boots.
type Decision struct {
	// Mode is what the machine should boot.
	Mode Mode
	// Env is the environment for Mode; zero for ModeLocal and when Missing
	// is set.
	Env Environment
	// InstalledOS, with ModeLocal, says that the local disk holds the
	// system rackd deployed (the machine is DEPLOYED, or DEPLOYING with
	// its image written): booting it runs that system. Otherwise the
	// local disk is only what the machine boots when nothing else is due.
	InstalledOS bool
	// Missing, when not empty, says that the environment Mode needs is not
	// available (no image imported yet); the config prints it and boots
	// from local disk instead, so that a machine is never left with a
	// broken config.
	Missing string
	// Known reports whether the MAC belongs to a machine in the store.
	Known bool
	// Machine is the machine the decision is for (zero when unknown).
	Machine MachineInfo
	// Arch is the architecture the environments were chosen for.
	Arch string
}

// Boots reports whether the decision boots a kernel rather than the local
// disk.
func (d Decision) Boots() bool { return d.Mode != ModeLocal && d.Missing == "" }

// Decide is the boot decision: from what the store knows about a machine
// (known false: the MAC is unknown) and the environments of its
// architecture, what the machine boots. For an unknown MAC only m.Arch is
// read: the architecture being rendered, which the caller chose. It is
// pure, so every route (TFTP, HTTP, each loader's language) that uses it
// agrees.
func Decide(m MachineInfo, known bool, env Environments) Decision {
	arch := m.Arch
	if arch == "" {
		arch = DefaultArch
	}
	if !known {
		d := Decision{Mode: ModeEnlist, Arch: arch}
		if !env.Enlist.Available() {
			d.Missing = fmt.Sprintf("rackd: no enlistment environment is imported for %s: booting from local disk", arch)
		} else {
			d.Env = env.Enlist
		}
		return d
	}
	d := Decision{Known: true, Machine: m, Arch: arch}
	switch m.State {
	case stateCommissioning:
		d.Mode = ModeCommission
		if env.Commission.Available() {
			d.Env = env.Commission
		} else {
			d.Missing = fmt.Sprintf("rackd: no commissioning environment is imported for %s: booting from local disk", arch)
		}
	case stateDeploying:
		if m.DiskWritten {
			d.Mode, d.InstalledOS = ModeLocal, true
			break
		}
		d.Mode = ModeDeploy
		e, ok := env.Deploy[m.Image]
		switch {
		case m.Image == "":
			d.Missing = "rackd: the machine is DEPLOYING but has no deploy image: booting from local disk"
		case !ok || !e.Available():
			d.Missing = fmt.Sprintf("rackd: deploy image %s is not imported for %s: booting from local disk", m.Image, arch)
		default:
			d.Env = e
		}
	case stateReleasing:
		if !m.Erase {
			d.Mode = ModeLocal
			break
		}
		d.Mode = ModeErase
		if env.Commission.Available() {
			d.Env = env.Commission
		} else {
			d.Missing = fmt.Sprintf("rackd: no commissioning environment is imported for %s to erase with: booting from local disk", arch)
		}
	case stateDeployed:
		d.Mode, d.InstalledOS = ModeLocal, true
	default:
		d.Mode = ModeLocal
	}
	return d
}

// Cmdline returns the kernel command line of a decision that boots:
// rackd.url=<httpBase>, rackd.mode=<mode> and, for known machines,
// rackd.machine=<id>, then the environment's own arguments (the image's
// cmdline). It returns nil when the decision does not boot a kernel.
//
// No credential is ever rendered: anyone who names a MAC can fetch its
// config over TFTP or HTTP. The environment claims its phase credential
// from rackd instead, once, from the address of its DHCP binding.
//
// rackd's arguments come first so that an image's arguments can end with
// "--" and arguments for init, which must be last: the kernel hands
// everything after "--" to init. An image cannot override rackd's
// arguments with a later duplicate either: prepare refuses rackd.* (and
// initrd=, which the loaders' configs set) in Env.Args.
//
// The base URL is an argument rather than part of the decision because it
// depends on the request: the agent answers each client with the address
// of the interface the request came in on.
func (d Decision) Cmdline(httpBase string) []string {
	if !d.Boots() {
		return nil
	}
	args := make([]string, 0, len(d.Env.Args)+4)
	args = append(args, "rackd.url="+httpBase, "rackd.mode="+string(d.Mode))
	if d.Known {
		args = append(args, "rackd.machine="+d.Machine.ID)
	}
	if im := d.Env.Disk; im != nil && d.Mode == ModeDeploy {
		args = append(args, "rackd.image="+im.Path, "rackd.image_sha256="+im.SHA256,
			"rackd.image_size="+strconv.FormatInt(im.Size, 10))
		// A raw image says nothing more: an environment that predates
		// compressed images keeps working with it.
		if im.Compressed() {
			args = append(args, "rackd.image_format="+im.Format, "rackd.image_raw_size="+strconv.FormatInt(im.RawSize, 10))
			if im.RawSHA256 != "" {
				args = append(args, "rackd.image_raw_sha256="+im.RawSHA256)
			}
		}
		if im.Chunks != "" {
			args = append(args, "rackd.image_chunks="+im.Chunks)
		}
	}
	return append(args, d.Env.Args...)
}
