package bootconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"grub/grub.cfg", "boot/grub/grub.cfg", "grub/grub.cfg-aa:bb:cc:dd:ee:ff",
		"grub/grub.cfg-01-AA-BB-CC-DD-EE-FF", "boot/grub/grub.cfg-default-arm64",
		"pxelinux.cfg/default", "pxelinux.cfg/01-aa-bb-cc-dd-ee-ff", "ipxe/aa:bb:cc:dd:ee:ff.ipxe",
		"ipxe/aa-bb-cc-dd-ee-ff.ipxe", "ipxe?mac=aa:bb:cc:dd:ee:ff", "ipxe?mac=aa%3Abb%3Acc%3Add%3Aee%3Aff&x=1",
		"../../etc/passwd", "/etc/passwd", "grub/grub.cfg\x00", "pxelinux.cfg/C0A80001", "a//b", `a\b`,
		strings.Repeat("a/", 200),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r, err := ParsePath(p)
		if err != nil {
			if !errors.Is(err, ErrNotConfig) && !errors.Is(err, ErrBadPath) {
				t.Fatalf("ParsePath(%q): unexpected error %v", p, err)
			}
			if r != (Request{}) {
				t.Fatalf("ParsePath(%q) failed with %v but returned %+v", p, err, r)
			}
			if errors.Is(err, ErrNotConfig) && !safeForTree(p) {
				// The file tree is looked up with this path
				// next: it must be free of escapes.
				t.Fatalf("ParsePath(%q) passed an unsafe path on to the file tree", p)
			}
			return
		}
		if !safeForTree(p) && !strings.HasPrefix(p, "ipxe?") {
			t.Fatalf("ParsePath(%q) accepted an unsafe path as %+v", p, r)
		}
		c := r.Path()
		again, err := ParsePath(c)
		if err != nil || again != r {
			t.Fatalf("ParsePath(%q) = %+v; its canonical path %q parses to %+v, %v", p, r, c, again, err)
		}
		if again.Path() != c {
			t.Fatalf("canonical path %q is not a fixed point: %q", c, again.Path())
		}
		if r.MAC != "" && r.MAC != strings.ToLower(r.MAC) {
			t.Fatalf("ParsePath(%q): MAC %q not lower case", p, r.MAC)
		}
	})
}

// safeForTree is an independent statement of what checkPath promises.
func safeForTree(p string) bool {
	if p == "" || len(p) > MaxPathLen || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return false
		}
	}
	for _, c := range []byte(p) {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// fixedSource answers one machine for every MAC (when known) and the same
// environments for every architecture.
type fixedSource struct {
	m     MachineInfo
	known bool
	env   Environments
}

func (s fixedSource) Machine(context.Context, string) (MachineInfo, bool, error) {
	return s.m, s.known, nil
}

func (s fixedSource) Environments(context.Context, string) (Environments, error) {
	return s.env, nil
}

// sanitize replaces every byte but ASCII letters and digits with 'x',
// keeping the length, so that the result passes every check the original
// could pass and takes the same branches of Decide and Render.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !allowed(c, "") {
			b[i] = 'x'
		}
	}
	return string(b)
}

// The characters that mean something to at least one of GRUB script,
// pxelinux, iPXE script or the kernel command line, and that no value may
// carry (unlike ',', '=' or '~', which kernel arguments use).
const metachars = "'\"$\\{};|&<>#`()[]*?!^"

// FuzzRender feeds arbitrary machine and environment strings to Render.
// Hostile values must be refused; when Render accepts them, the config must
// have exactly the structure it has with harmless values of the same
// length: the same lines, each with the same command, the same number of
// words and the same quotes and other metacharacters. A value that smuggled
// in a newline, a space, a quote or a $ would change one of those.
func FuzzRender(f *testing.F) {
	f.Add(uint8(0), true, "m-1", "web1", "DEPLOYING", "amd64", "ubuntu-24.04", "images/k/vmlinuz", "images/k/initrd.img", "console=ttyS0,115200n8")
	f.Add(uint8(1), true, "m-1", "web1\nexit", "COMMISSIONING", "amd64", "x", "k", "i", "quiet")
	f.Add(uint8(2), false, "", "", "", "", "", "vmlinuz", "", "a'b")
	f.Add(uint8(3), true, "m 1", "web1", "DEPLOYED", "arm64", "img", "k", "i", "${x}")
	f.Add(uint8(4), true, "m-1", "web1", "DEPLOYING", "arm64", "evil'\nLABEL x", "k", "i", "a")
	f.Add(uint8(5), true, "m-1", "h", "DEPLOYING", "", "img", "../k", "i,j", "x;y")
	f.Fuzz(func(t *testing.T, kind uint8, known bool, id, hostname, state, arch, image, kernel, initrd, arg string) {
		reqs := []Request{
			{Kind: GrubMAC, MAC: macDeploying},
			{Kind: GrubDefault, Arch: "amd64"},
			{Kind: GrubDefault, Arch: "arm64"},
			{Kind: PXELinuxMAC, MAC: macDeploying},
			{Kind: PXELinuxDefault},
			{Kind: IPXEMAC, MAC: macDeploying},
		}
		req := reqs[int(kind)%len(reqs)]
		source := func(clean func(string) string) Source {
			env := Environment{Kernel: clean(kernel)}
			if initrd != "" {
				env.Initrds = []string{clean(initrd)}
			}
			if arg != "" {
				env.Args = []string{clean(arg)}
			}
			return fixedSource{
				m: MachineInfo{
					ID: clean(id), Hostname: clean(hostname), State: clean(state), Arch: clean(arch),
					Image: clean(image),
				},
				known: known,
				env:   Environments{Enlist: env, Commission: env, Deploy: map[string]Environment{clean(image): env}},
			}
		}
		ctx := context.Background()
		got, err := Render(ctx, source(func(s string) string { return s }), req, Bases{HTTP: testBase})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Render: unexpected error %v", err)
			}
			return
		}
		want, err := Render(ctx, source(sanitize), req, Bases{HTTP: testBase})
		if err != nil {
			t.Fatalf("Render accepted the values but refused harmless ones of the same length: %v\n%s", err, got)
		}
		for i, c := range got {
			if (c < 0x20 || c > 0x7e) && c != '\n' && c != '\t' {
				t.Fatalf("byte %#x at %d in\n%s", c, i, got)
			}
		}
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		if len(gl) != len(wl) {
			t.Fatalf("%d lines, want %d:\n%s\n--- with harmless values:\n%s", len(gl), len(wl), got, want)
		}
		for i := range gl {
			g, w := strings.Fields(gl[i]), strings.Fields(wl[i])
			if len(g) != len(w) || (len(g) > 0 && g[0] != w[0]) {
				t.Fatalf("line %d %q has a different shape from %q", i+1, gl[i], wl[i])
			}
			if len(gl[i])-len(strings.TrimLeft(gl[i], "\t")) != len(wl[i])-len(strings.TrimLeft(wl[i], "\t")) {
				t.Fatalf("line %d %q indented differently from %q", i+1, gl[i], wl[i])
			}
			for _, m := range metachars {
				if strings.Count(gl[i], string(m)) != strings.Count(wl[i], string(m)) {
					t.Fatalf("line %d %q has a different number of %q from %q", i+1, gl[i], m, wl[i])
				}
			}
		}
	})
}
