package bootconf

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

// Bases says where the rendered configs send loaders for their files.
type Bases struct {
	// HTTP is rackd's HTTP base URL as the client reaches it, e.g.
	// "http://10.0.0.1:5240" (a trailing slash is ignored). Kernels and
	// initrds are fetched from <HTTP>/boot/<path> by GRUB and iPXE, and
	// the environments are told rackd.url=<HTTP>. Required for every
	// config but the GRUB pre-loader.
	//
	// There is no separate TFTP address: pxelinux fetches with paths
	// relative to the TFTP server it was loaded from, iPXE fetches over
	// HTTP, and GRUB fetches over HTTP or, when it has no http module
	// (Debian's signed GRUB under Secure Boot), over TFTP from this
	// URL's host, where rackd serves TFTP too.
	HTTP string
}

// Render renders the config req asks for, reading the machine and the
// environments from src on every call: nothing is cached, so the answer
// always follows the store. It fails with ErrInvalid when a value cannot be
// written safely, and with the Source's error, wrapped, when src fails.
//
// Unknown MACs boot the enlistment environment. GRUB and iPXE do not say
// their architecture in a per-MAC request, so their configs carry the
// environment of both architectures and pick one with $grub_cpu or
// ${buildarch}; pxelinux only runs on x86 BIOS, so it gets amd64.
func Render(ctx context.Context, src Source, req Request, bases Bases) ([]byte, error) {
	switch req.Kind {
	case GrubPreload:
		return []byte(grubPreload), nil
	case GrubMAC, PXELinuxMAC, IPXEMAC:
		// A Request built by hand rather than by ParsePath must not
		// carry a MAC into a comment line unchecked.
		if mac, ok := parseMAC(req.MAC, ':'); !ok || mac != req.MAC {
			return nil, fmt.Errorf("%w: request MAC %q is not in lower-case colon form", ErrBadPath, req.MAC)
		}
	case GrubDefault:
		if !isArch(req.Arch) {
			return nil, fmt.Errorf("%w: no default config for arch %q", ErrBadPath, req.Arch)
		}
	case PXELinuxDefault:
	default:
		return nil, fmt.Errorf("%w: unknown request kind %d", ErrBadPath, req.Kind)
	}
	b, err := parseBase(bases.HTTP)
	if err != nil {
		return nil, err
	}
	ds, err := decisions(ctx, src, req)
	if err != nil {
		return nil, err
	}
	plans := make([]plan, len(ds))
	for i, d := range ds {
		if plans[i], err = prepare(d, b); err != nil {
			return nil, err
		}
	}
	w := &out{}
	switch req.Kind {
	case GrubMAC, GrubDefault:
		writeGrub(w, req, b, plans)
	case PXELinuxMAC, PXELinuxDefault:
		writePXELinux(w, plans[0])
	case IPXEMAC:
		writeIPXE(w, req, b, plans)
	}
	return w.Bytes(), nil
}

// decisions reads the store through src and decides, once per architecture
// the config must cover: one for a known machine or a default config, both
// for an unknown MAC asked by GRUB or iPXE (amd64 first).
func decisions(ctx context.Context, src Source, req Request) ([]Decision, error) {
	var archs []string
	switch req.Kind {
	case GrubDefault:
		archs = []string{req.Arch}
	case PXELinuxDefault:
		archs = []string{DefaultArch}
	default:
		m, known, err := src.Machine(ctx, req.MAC)
		if err != nil {
			return nil, fmt.Errorf("bootconf: looking up %s: %w", req.MAC, err)
		}
		if known {
			// A machine that boots from disk needs no environment:
			// deciding first keeps local boot working while the
			// images registry is unavailable.
			d := Decide(m, true, Environments{})
			if d.Mode == ModeLocal {
				return []Decision{d}, nil
			}
			env, err := src.Environments(ctx, d.Arch)
			if err != nil {
				return nil, fmt.Errorf("bootconf: environments for %s: %w", d.Arch, err)
			}
			return []Decision{Decide(m, true, env)}, nil
		}
		archs = []string{"amd64", "arm64"}
		if req.Kind == PXELinuxMAC {
			archs = []string{DefaultArch}
		}
	}
	ds := make([]Decision, 0, len(archs))
	for _, a := range archs {
		env, err := src.Environments(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("bootconf: environments for %s: %w", a, err)
		}
		ds = append(ds, Decide(MachineInfo{Arch: a}, false, env))
	}
	return ds, nil
}

// out is a config being written, one line at a time at the current
// indentation.
type out struct {
	bytes.Buffer
	indent string
}

func (w *out) line(format string, a ...any) {
	w.WriteString(w.indent)
	fmt.Fprintf(w, format, a...)
	w.WriteByte('\n')
}

func (w *out) push() { w.indent += "\t" }
func (w *out) pop()  { w.indent = w.indent[:len(w.indent)-1] }

// grubPreload is grub/grub.cfg. GRUB 2.06 asks for grub.cfg-01-<mac> and
// the hex-IP names under its $prefix before this file, and rackd answers
// grub.cfg-01-<mac> for every MAC, so this file is read only by GRUB builds
// that go straight to grub.cfg, or when the per-MAC answer failed.
//
// It chains to the per-MAC file with configfile, which loads a file and
// runs it in a new variable context, and returns only when the file could
// not be read (otherwise the file boots or exits). $net_default_mac is the
// MAC of the interface GRUB booted from in aa:bb:cc:dd:ee:ff form, which is
// why rackd accepts that spelling; $prefix is the directory this file came
// from on rackd's server (grub/ or boot/grub/, both served), so the same
// text works for either. When there is no MAC or its file fails, it falls
// back to the default of GRUB's own CPU: $grub_cpu is x86_64 or i386 (BIOS
// GRUB) on PCs, both amd64 machines, and arm64 on ARM servers.
const grubPreload = `# rackd: GRUB pre-loader. Try the configuration of this machine, then the
# default for the CPU GRUB runs on. configfile returns only when it could
# not load the file.
if [ -n "$net_default_mac" ]; then
	configfile "$prefix/grub.cfg-$net_default_mac"
fi
if [ "$grub_cpu" = "arm64" ]; then
	configfile "$prefix/grub.cfg-default-arm64"
else
	configfile "$prefix/grub.cfg-default-amd64"
fi
`

func writeGrub(w *out, req Request, b base, ps []plan) {
	if len(ps) == 1 {
		grubBody(w, b, ps[0])
		return
	}
	w.line("# rackd: unknown machine %s: enlist, in the environment for the CPU GRUB runs on", req.MAC)
	w.line(`if [ "$grub_cpu" = "arm64" ]; then`)
	w.push()
	grubBody(w, b, ps[1])
	w.pop()
	w.line("else")
	w.push()
	grubBody(w, b, ps[0])
	w.pop()
	w.line("fi")
}

// grubBody boots the plan's kernel from a one-entry menu with a local-disk
// fallback entry: GRUB runs the fallback when loading the kernel or initrd
// fails, so a vanished image degrades to local boot rather than to a GRUB
// prompt.
func grubBody(w *out, b base, p plan) {
	w.line("# rackd: %s", p.title)
	if !p.d.Boots() {
		if p.d.Missing != "" {
			w.line("echo '%s'", p.d.Missing)
			w.line("sleep 5")
		}
		grubLocal(w)
		return
	}
	w.line("set default=0")
	w.line("set fallback=1")
	w.line("set timeout=0")
	w.line("menuentry 'rackd: %s' {", p.title)
	w.push()
	// Debian's signed network GRUB (the one shim accepts under Secure
	// Boot) has no http module built in, and under Secure Boot it
	// refuses to load the unsigned http.mod. insmod reports that on the
	// console but returns success all the same (GRUB 2.06), so the test
	// is whether GRUB can now open an http device: [ -d (http,...)/ ] is
	// true as soon as the protocol is registered: test opens the device,
	// which fetches no file, and a device's root is always a directory. Without it
	// the files come over TFTP from the same host, whose root is the
	// tree HTTP serves under /boot/. A GRUB with http built in, or which
	// may load it, keeps the faster path. The choice is made in the
	// entry, so it holds in whichever context runs it.
	w.line("# rackd: HTTP when this GRUB has or may load the http module, else TFTP")
	w.line("insmod http")
	w.line("if [ -d %s/ ]; then", b.grubHTTP)
	w.push()
	w.line("set rackd_base=%s", b.grubBoot())
	w.pop()
	w.line("else")
	w.push()
	w.line("set rackd_base=%s", b.grubTFTP)
	w.pop()
	w.line("fi")
	// Arguments are single-quoted so that GRUB expands nothing in them;
	// prepare has already kept quotes out. The file paths are checked
	// too (checkFile): only $rackd_base, set just above, is expanded.
	w.line("linux $rackd_base/%s '%s'", p.kernel, strings.Join(p.args, "' '"))
	if len(p.initrds) > 0 {
		files := make([]string, len(p.initrds))
		for i, f := range p.initrds {
			files[i] = "$rackd_base/" + f
		}
		w.line("initrd %s", strings.Join(files, " "))
	}
	w.pop()
	w.line("}")
	w.line("menuentry 'rackd: boot from local disk' {")
	w.push()
	grubLocal(w)
	w.pop()
	w.line("}")
}

// grubLocal boots the local disk. Under UEFI, exit hands control back to
// the firmware's boot manager, which goes on with the next entry of its
// boot order: the disk, or the OS loader an installer registered. rackd
// does not chainload a guessed \EFI\...\*.efi instead, because that would
// bypass the boot order the OS set. BIOS GRUB (grub-pc) cannot return to
// the BIOS's boot order, so there the fallback chainloads the first disk's
// boot sector, as the BIOS would.
func grubLocal(w *out) {
	w.line(`if [ "$grub_platform" = "efi" ]; then`)
	w.push()
	w.line("exit")
	w.pop()
	w.line("fi")
	w.line("set root=(hd0)")
	w.line("chainloader +1")
	w.line("boot")
}

// writePXELinux writes a pxelinux config. pxelinux (BIOS) fetches KERNEL
// and initrd= by TFTP, relative to the directory it was loaded from: the
// boot tree's root, where DHCP points it.
func writePXELinux(w *out, p plan) {
	w.line("# rackd: %s", p.title)
	if !p.d.Boots() {
		if p.d.Missing != "" {
			// SAY prints while the file is read; PROMPT 1 with a
			// 5 s TIMEOUT (in tenths of a second) leaves it on
			// screen before LOCALBOOT.
			w.line("SAY %s", p.d.Missing)
			w.line("DEFAULT local")
			w.line("PROMPT 1")
			w.line("TIMEOUT 50")
		} else {
			w.line("DEFAULT local")
			w.line("PROMPT 0")
		}
		pxeLocal(w)
		return
	}
	w.line("DEFAULT rackd")
	w.line("PROMPT 0")
	// ONERROR runs a command line, here the "local" label, when the
	// kernel cannot be loaded: a vanished image boots the disk rather
	// than stopping at a boot: prompt.
	w.line("ONERROR local")
	w.line("LABEL rackd")
	w.push()
	// KERNEL picks the image type from the file's extension (.0, .c32,
	// .com, …); kernels in the images store are named vmlinuz or by hash,
	// which it loads as Linux, and KERNEL works on every pxelinux.
	w.line("KERNEL %s", p.kernel)
	args := p.args
	if len(p.initrds) > 0 {
		// pxelinux loads several initrds given as one comma-separated
		// initrd= argument.
		args = append([]string{"initrd=" + strings.Join(p.initrds, ",")}, args...)
	}
	w.line("APPEND %s", strings.Join(args, " "))
	w.pop()
	pxeLocal(w)
}

// pxeLocal is the local-disk label. LOCALBOOT 0 makes pxelinux return to
// the BIOS, which boots the next device of its boot order.
func pxeLocal(w *out) {
	w.line("LABEL local")
	w.push()
	w.line("LOCALBOOT 0")
	w.pop()
}

func writeIPXE(w *out, req Request, b base, ps []plan) {
	w.line("#!ipxe")
	if len(ps) == 1 {
		ipxeBody(w, b, ps[0], "rackd_failed")
		return
	}
	// ${buildarch} is the architecture iPXE was built for: i386
	// (undionly.kpxe, BIOS) or x86_64 on PCs, both amd64 machines, and
	// arm64 on ARM servers.
	w.line("# rackd: unknown machine %s: enlist, in the environment for the architecture iPXE was built for", req.MAC)
	w.line("iseq ${buildarch} arm64 && goto rackd_arm64 || goto rackd_amd64")
	// The labels name the two architectures rackd renders for unknown
	// machines (decisions), never a value from the store.
	for _, p := range ps {
		w.line(":rackd_%s", p.arch)
		ipxeBody(w, b, p, "rackd_failed_"+p.arch)
	}
}

// ipxeBody ends with boot or exit on every path, so that the bodies of
// several architectures in one script never run into each other. failed is
// the label of its fallback, unique within the script.
func ipxeBody(w *out, b base, p plan, failed string) {
	w.line("# rackd: %s", p.title)
	if !p.d.Boots() {
		if p.d.Missing != "" {
			w.line("echo %s", p.d.Missing)
			// A trailing || ignores the failure of sleep, which a
			// key press interrupts or a minimal build may lack;
			// iPXE would otherwise abort the script.
			w.line("sleep 5 ||")
		}
		// exit ends the script and iPXE: the BIOS or UEFI firmware
		// then boots the next device of its boot order.
		w.line("exit")
		return
	}
	// A kernel booted through the EFI stub loads its initrds itself, by
	// the names given as initrd= on its command line (the BIOS path
	// ignores them). Explicit --name values keep those names short and
	// unique even when two initrd files share a base name.
	args := make([]string, 0, len(p.initrds)+len(p.args))
	for i := range p.initrds {
		args = append(args, fmt.Sprintf("initrd=initrd%d", i))
	}
	args = append(args, p.args...)
	w.line("kernel %s %s || goto %s", b.file(p.kernel), strings.Join(args, " "), failed)
	for i, f := range p.initrds {
		w.line("initrd --name initrd%d %s || goto %s", i, b.file(f), failed)
	}
	w.line("boot || goto %s", failed)
	w.line(":%s", failed)
	w.line("echo rackd: could not boot the %s environment: booting from local disk", p.d.Mode)
	w.line("sleep 5 ||")
	w.line("exit")
}
