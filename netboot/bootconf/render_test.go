package bootconf

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the rendered configs")

// render renders path from src with the test base, failing the test on
// error.
func render(t *testing.T, src Source, path string) string {
	t.Helper()
	req, err := ParsePath(path)
	if err != nil {
		t.Fatalf("ParsePath(%q): %v", path, err)
	}
	b, err := Render(context.Background(), src, req, Bases{HTTP: testBase})
	if err != nil {
		t.Fatalf("Render(%q): %v", path, err)
	}
	return string(b)
}

// TestGolden renders every config kind in every situation and compares it
// with testdata/<name>.golden; go test -update rewrites those files.
func TestGolden(t *testing.T) {
	imported, empty := newFixture(true), newFixture(false)
	perMAC := map[string]func(mac string) string{
		"grub":     func(mac string) string { return "grub/grub.cfg-" + mac },
		"pxelinux": func(mac string) string { return "pxelinux.cfg/01-" + strings.ReplaceAll(mac, ":", "-") },
		"ipxe":     func(mac string) string { return "ipxe/" + mac + ".ipxe" },
	}
	type golden struct {
		src  Source
		path string
	}
	cases := map[string]golden{
		"grub-preload":                {imported, "grub/grub.cfg"},
		"grub-default-amd64-enlist":   {imported, "grub/grub.cfg-default-amd64"},
		"grub-default-arm64-enlist":   {imported, "boot/grub/grub.cfg-default-arm64"},
		"grub-default-amd64-missing":  {empty, "grub/grub.cfg-default-amd64"},
		"pxelinux-default-enlist":     {imported, "pxelinux.cfg/default"},
		"pxelinux-default-missing":    {empty, "pxelinux.cfg/default"},
		"ipxe-query-deploy":           {imported, "ipxe?mac=" + macDeploying},
		"grub-01-spelling-commission": {imported, "boot/grub/grub.cfg-01-52-54-00-00-00-01"},
	}
	for kind, path := range perMAC {
		for scenario, g := range map[string]golden{
			"enlist":             {imported, path(macUnknown)},
			"commission":         {imported, path(macCommissioning)},
			"deploy":             {imported, path(macDeploying)},
			"local":              {imported, path(macDeployed)},
			"missing-enlist":     {empty, path(macUnknown)},
			"missing-commission": {empty, path(macCommissioning)},
			"missing-deploy":     {imported, path(macNoImage)},
			"deploy-cmdline":     {imported, path(macRescue)},
			"deploy-disk":        {imported, path(macDisk)},
		} {
			cases[kind+"-"+scenario] = g
		}
	}
	for name, g := range cases {
		t.Run(name, func(t *testing.T) {
			got := render(t, g.src, g.path)
			file := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (go test -update rewrites it)\n--- got\n%s--- want\n%s", g.path, file, got, want)
			}
		})
	}
	// Every golden file belongs to a case: a renamed case must not leave
	// a stale file behind that nothing checks.
	files, err := filepath.Glob(filepath.Join("testdata", "*.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := cases[strings.TrimSuffix(filepath.Base(f), ".golden")]; !ok {
			t.Errorf("%s has no test case", f)
		}
	}
}

// The iPXE script of a DEPLOYING machine fetches its image's kernel and
// initrd and names the initrd on the kernel line, which a kernel booted
// through the EFI stub needs to find it.
func TestIPXEDeploying(t *testing.T) {
	src := newFixture(true)
	for _, path := range []string{"ipxe/" + macDeploying + ".ipxe", "ipxe?mac=" + macDeploying} {
		got := render(t, src, path)
		var kernel string
		for _, l := range strings.Split(got, "\n") {
			if strings.HasPrefix(l, "kernel ") {
				kernel = l
			}
		}
		for _, want := range []string{
			"kernel http://10.0.0.1:5240/boot/images/ubuntu-24.04-amd64/vmlinuz ",
			" initrd=initrd0 ",
			" ro ip=dhcp ",
			" rackd.url=http://10.0.0.1:5240 ",
			" rackd.mode=deploy ",
			" rackd.machine=m-0002 ",
		} {
			if !strings.Contains(kernel, want) {
				t.Errorf("%s: kernel line %q lacks %q", path, kernel, want)
			}
		}
		if want := "\ninitrd --name initrd0 http://10.0.0.1:5240/boot/images/ubuntu-24.04-amd64/initrd.img "; !strings.Contains(got, want) {
			t.Errorf("%s: no %q in\n%s", path, want, got)
		}
		if !strings.HasPrefix(got, "#!ipxe\n") {
			t.Errorf("%s: not an iPXE script:\n%s", path, got)
		}
	}
}

// A machine moved from DEPLOYING to DEPLOYED gets local boot on the very
// next request, in every language: nothing is cached between requests.
func TestNoStaleCache(t *testing.T) {
	for _, path := range []string{
		"ipxe/" + macDeploying + ".ipxe",
		"grub/grub.cfg-" + macDeploying,
		"pxelinux.cfg/01-" + strings.ReplaceAll(macDeploying, ":", "-"),
	} {
		t.Run(path, func(t *testing.T) {
			src := newFixture(true)
			before := render(t, src, path)
			if !strings.Contains(before, "rackd.mode=deploy") {
				t.Fatalf("DEPLOYING machine does not deploy:\n%s", before)
			}
			src.setState(macDeploying, "DEPLOYED")
			after := render(t, src, path)
			if strings.Contains(after, "vmlinuz") || strings.Contains(after, "rackd.mode") {
				t.Errorf("DEPLOYED machine still boots a kernel on the next request:\n%s", after)
			}
			if !strings.Contains(after, "from local disk") {
				t.Errorf("DEPLOYED machine does not boot from local disk:\n%s", after)
			}
			if m, _ := src.calls(); m != 2 {
				t.Errorf("Source.Machine called %d times for 2 requests", m)
			}
			// And back: a redeploy is seen at once too.
			src.setState(macDeploying, "DEPLOYING")
			if again := render(t, src, path); again != before {
				t.Errorf("redeploy renders\n%s\nwant\n%s", again, before)
			}
		})
	}
}

// Local boot does not read the environments, so it keeps working when the
// images registry fails.
func TestLocalNeedsNoEnvironments(t *testing.T) {
	src := newFixture(true)
	src.envErr = errors.New("registry down")
	got := render(t, src, "ipxe/"+macDeployed+".ipxe")
	if !strings.Contains(got, "\nexit\n") {
		t.Errorf("not a local boot:\n%s", got)
	}
	if _, e := src.calls(); e != 0 {
		t.Errorf("Environments called %d times for a local boot", e)
	}
}

func TestRenderSourceErrors(t *testing.T) {
	boom := errors.New("store closed")
	tests := map[string]struct {
		path   string
		broken func(*fakeSource)
	}{
		"machine lookup":             {"grub/grub.cfg-" + macDeploying, func(f *fakeSource) { f.machineErr = boom }},
		"environments, known":        {"ipxe/" + macDeploying + ".ipxe", func(f *fakeSource) { f.envErr = boom }},
		"environments, unknown":      {"ipxe/" + macUnknown + ".ipxe", func(f *fakeSource) { f.envErr = boom }},
		"environments, default":      {"pxelinux.cfg/default", func(f *fakeSource) { f.envErr = boom }},
		"environments, grub default": {"grub/grub.cfg-default-arm64", func(f *fakeSource) { f.envErr = boom }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src := newFixture(true)
			tc.broken(src)
			req, err := ParsePath(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Render(context.Background(), src, req, Bases{HTTP: testBase})
			if !errors.Is(err, boom) || b != nil {
				t.Errorf("Render = %q, %v; want the source's error", b, err)
			}
		})
	}
}

func TestRenderPreloadNeedsNothing(t *testing.T) {
	// The pre-loader is static: no base, no source.
	b, err := Render(context.Background(), nil, Request{Kind: GrubPreload}, Bases{})
	if err != nil || !bytes.Contains(b, []byte(`configfile "$prefix/grub.cfg-$net_default_mac"`)) {
		t.Errorf("Render(preload) = %q, %v", b, err)
	}
}

// Requests built by hand are checked like parsed ones.
func TestRenderBadRequest(t *testing.T) {
	for _, req := range []Request{
		{},
		{Kind: Kind(99)},
		{Kind: GrubMAC},
		{Kind: IPXEMAC, MAC: "52:54:00:00:00:99\n#"},
		{Kind: PXELinuxMAC, MAC: "52-54-00-00-00-99"},
		{Kind: GrubMAC, MAC: "52:54:00:AB:CD:EF"},
		{Kind: GrubDefault, Arch: "amd64\nexit"},
		{Kind: GrubDefault},
	} {
		if b, err := Render(context.Background(), newFixture(true), req, Bases{HTTP: testBase}); !errors.Is(err, ErrBadPath) || b != nil {
			t.Errorf("Render(%+v) = %q, %v; want ErrBadPath", req, b, err)
		}
	}
}

func TestBases(t *testing.T) {
	src := newFixture(true)
	req := Request{Kind: GrubMAC, MAC: macDeploying}
	good := map[string]struct{ url, grub, tftp string }{
		"http://10.0.0.1:5240":         {"http://10.0.0.1:5240/boot/", "(http,10.0.0.1:5240)/boot", "(tftp,10.0.0.1)"},
		"http://10.0.0.1:5240/":        {"http://10.0.0.1:5240/boot/", "(http,10.0.0.1:5240)/boot", "(tftp,10.0.0.1)"},
		"http://rackd.example":         {"http://rackd.example/boot/", "(http,rackd.example)/boot", "(tftp,rackd.example)"},
		"http://10.0.0.1:8080/rackd/":  {"http://10.0.0.1:8080/rackd/boot/", "(http,10.0.0.1:8080)/rackd/boot", "(tftp,10.0.0.1)"},
		"http://[fd00::1]:5240":        {"http://[fd00::1]:5240/boot/", "(http,[fd00::1]:5240)/boot", "(tftp,[fd00::1])"},
		"http://[fd00::1]":             {"http://[fd00::1]/boot/", "(http,[fd00::1])/boot", "(tftp,[fd00::1])"},
		"HTTP://10.0.0.1:5240":         {"http://10.0.0.1:5240/boot/", "(http,10.0.0.1:5240)/boot", "(tftp,10.0.0.1)"},
		"http://10.0.0.1:5240/a/b-c.d": {"http://10.0.0.1:5240/a/b-c.d/boot/", "(http,10.0.0.1:5240)/a/b-c.d/boot", "(tftp,10.0.0.1)"},
	}
	for in, want := range good {
		b, err := parseBase(in)
		if err != nil {
			t.Errorf("parseBase(%q): %v", in, err)
			continue
		}
		if b.file("") != want.url || b.grubBoot() != want.grub || b.grubTFTP != want.tftp ||
			!strings.HasPrefix(want.grub, b.grubHTTP+"/") || !strings.HasSuffix(b.grubHTTP, ")") {
			t.Errorf("parseBase(%q) = %+v, want %+v", in, b, want)
		}
	}
	bad := []string{
		"", "10.0.0.1:5240", "https://10.0.0.1", "tftp://10.0.0.1", "http://", "http:///boot",
		"http://u:p@10.0.0.1", "http://10.0.0.1/?x=1", "http://10.0.0.1/#f", "http://10.0.0.1/a b",
		"http://10.0.0.1/a%20b", "http://10.0.0.1/'", "http://10.0.0.1/$x", "http://10.0.0.1/a/../b",
		"http://10.0.0.1/a;reboot", "http://host_name", "http://10.0.0.1\n/", "http://10.0.0.1?",
	}
	for _, in := range bad {
		if _, err := Render(context.Background(), src, req, Bases{HTTP: in}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Render with base %q = %v, want ErrInvalid", in, err)
		}
	}
}

// Values that would change a config's structure are refused, never
// written: each case would otherwise add a line, an argument, a quote or an
// expansion to some loader's config.
func TestRenderRefusesInjection(t *testing.T) {
	deploying := MachineInfo{ID: "m-1", Hostname: "web1", State: "DEPLOYING", Arch: "amd64", Image: "ubuntu-24.04"}
	env := testEnvironments("amd64")
	tests := map[string]struct {
		m   func(*MachineInfo)
		env func(*Environment)
	}{
		"hostname with newline": {m: func(m *MachineInfo) { m.Hostname = "web1\nexit" }},
		"hostname with quote":   {m: func(m *MachineInfo) { m.Hostname = "web1' --id x" }},
		"hostname with brace":   {m: func(m *MachineInfo) { m.Hostname = "web1}" }},
		"ID with space":         {m: func(m *MachineInfo) { m.ID = "m-1 rackd.mode=enlist" }},
		"ID with dollar":        {m: func(m *MachineInfo) { m.ID = "${net0/mac}" }},
		"empty ID":              {m: func(m *MachineInfo) { m.ID = "" }},
		"arch with newline":     {m: func(m *MachineInfo) { m.Arch = "amd64\nexit" }},
		"kernel traversal":      {env: func(e *Environment) { e.Kernel = "../../etc/shadow" }},
		"kernel absolute":       {env: func(e *Environment) { e.Kernel = "/vmlinuz" }},
		"kernel with space":     {env: func(e *Environment) { e.Kernel = "vmlinuz rackd.mode=x" }},
		"initrd with comma":     {env: func(e *Environment) { e.Initrds = []string{"a,../../b"} }},
		"empty initrd":          {env: func(e *Environment) { e.Initrds = []string{""} }},
		"too many initrds":      {env: func(e *Environment) { e.Initrds = make([]string, maxInitrds+1) }},
		"arg with dollar":       {env: func(e *Environment) { e.Args = []string{"x=${buildarch}"} }},
		"arg with semicolon":    {env: func(e *Environment) { e.Args = []string{"a;reboot"} }},
		"arg with double quote": {env: func(e *Environment) { e.Args = []string{`a="b c"`} }},
		"arg with single quote": {env: func(e *Environment) { e.Args = []string{"a'b"} }},
		"arg with newline":      {env: func(e *Environment) { e.Args = []string{"quiet\nLABEL evil"} }},
		"empty arg":             {env: func(e *Environment) { e.Args = []string{""} }},
		"arg overriding rackd":  {env: func(e *Environment) { e.Args = []string{"rackd.url=http://evil"} }},
		"arg naming an initrd":  {env: func(e *Environment) { e.Args = []string{"initrd=../x"} }},
		"command line too long": {env: func(e *Environment) {
			e.Args = []string{strings.Repeat("a", 500), strings.Repeat("b", 500), strings.Repeat("c", 500), strings.Repeat("d", 500)}
		}},
		"non-ASCII arg":            {env: func(e *Environment) { e.Args = []string{"console=ttyS0\u2028"} }},
		"image name with newline":  {m: func(m *MachineInfo) { m.Image = "evil\nexit" }},
		"image name with quote":    {m: func(m *MachineInfo) { m.Image = "evil'" }},
		"image name with space":    {m: func(m *MachineInfo) { m.Image = "a b" }},
		"image name with iPXE var": {m: func(m *MachineInfo) { m.Image = "${x}" }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, e := deploying, env.Deploy["ubuntu-24.04"]
			e.Initrds = append([]string(nil), e.Initrds...)
			if tc.m != nil {
				tc.m(&m)
			}
			if tc.env != nil {
				tc.env(&e)
			}
			src := &fakeSource{
				machines: map[string]MachineInfo{macDeploying: m},
				envs:     map[string]Environments{m.Arch: {Deploy: map[string]Environment{m.Image: e}}},
			}
			for _, path := range []string{"grub/grub.cfg-" + macDeploying, "ipxe/" + macDeploying + ".ipxe", "pxelinux.cfg/01-52-54-00-00-00-02"} {
				req, _ := ParsePath(path)
				b, err := Render(context.Background(), src, req, Bases{HTTP: testBase})
				if !errors.Is(err, ErrInvalid) || b != nil {
					t.Errorf("%s: Render = %q, %v; want ErrInvalid", path, b, err)
				}
			}
		})
	}
}

// Values a config does not carry are not checked: a DEPLOYED machine
// whose old image name is odd still boots from its disk.
func TestRenderIgnoresUnusedValues(t *testing.T) {
	src := &fakeSource{machines: map[string]MachineInfo{
		macDeployed: {ID: "m-3", Hostname: "db1", State: "DEPLOYED", Image: "old\nname"},
	}}
	got := render(t, src, "grub/grub.cfg-"+macDeployed)
	if !strings.Contains(got, "exit") || strings.Contains(got, "old") {
		t.Errorf("local boot config:\n%s", got)
	}
}

// BenchmarkRender measures one per-MAC answer from parse to bytes, the work
// a TFTP or HTTP request costs on top of the Source (here a map).
func BenchmarkRender(b *testing.B) {
	src := newFixture(true)
	for _, path := range []string{
		"grub/grub.cfg-01-52-54-00-00-00-02",
		"pxelinux.cfg/01-52-54-00-00-00-02",
		"ipxe/52:54:00:00:00:02.ipxe",
		"ipxe/52:54:00:00:00:99.ipxe",
	} {
		b.Run(path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := ParsePath(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Render(context.Background(), src, req, Bases{HTTP: testBase}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
