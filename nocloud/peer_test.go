package nocloud

// Tests against the real consumers of a seed, from Debian's packages
// (scripts/test-deps.sh installs them): cloud-init itself (its schema
// checker, its network renderers, its NoCloud datasource and config
// merger), dosfstools, libblkid, mtools and cloud-image-utils' cloud-localds.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// need skips the test when a peer tool is not installed.
func need(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/test-deps.sh installs it): %v", tool, err)
		}
	}
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// seedFiles are the seed's files by name, the way the image holds them.
func seedFiles(s Seed) map[string][]byte {
	m := map[string][]byte{"meta-data": s.MetaData, "user-data": s.UserData, "vendor-data": s.VendorData}
	if s.NetworkConfig != nil {
		m["network-config"] = s.NetworkConfig
	}
	return m
}

func render(t *testing.T, id Identity) Seed {
	t.Helper()
	s, err := Render(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPeerCloudInitSchema: cloud-init's schema checker accepts rackd's
// vendor-data and the empty user-data (and refuses a broken one, so it is
// not accepting everything).
func TestPeerCloudInitSchema(t *testing.T) {
	need(t, "cloud-init")
	dir := t.TempDir()
	// What rackd writes: vendor-data (the cases differ only in their URLs:
	// one http, one https) and the user-data of a deploy without any.
	// Each run of the checker takes seconds, so not every case.
	for name, b := range map[string][]byte{
		"vendor-data-http":  render(t, cases[0].id).VendorData,
		"vendor-data-https": render(t, cases[1].id).VendorData,
		"empty-user-data":   render(t, cases[0].id).UserData,
	} {
		path := filepath.Join(dir, name)
		write(t, path, b)
		if out := run(t, "cloud-init", "schema", "-c", path); !strings.Contains(string(out), "Valid cloud-config") {
			t.Errorf("%s: cloud-init schema says %s", name, out)
		}
	}
	bad := filepath.Join(dir, "bad")
	write(t, bad, []byte("#cloud-config\nphone_home: {url: \"http://h/p\", tries: ten}\nmanage_etc_hosts: sometimes\n"))
	if out, err := exec.Command("cloud-init", "schema", "-c", bad).CombinedOutput(); err == nil {
		t.Errorf("cloud-init schema accepts a broken phone_home: %s", out)
	}
}

// TestPeerNetConvert: cloud-init's own renderers turn the network-config
// into a static configuration with the addresses, gateways, DNS servers and
// search domains, for ifupdown (Debian's default), systemd-networkd and
// netplan (Ubuntu's).
func TestPeerNetConvert(t *testing.T) {
	need(t, "cloud-init")
	for _, tc := range cases {
		if len(tc.id.Interfaces) == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.id)
			dir := t.TempDir()
			nc := filepath.Join(dir, "network-config")
			write(t, nc, s.NetworkConfig)
			convert := func(format string) string {
				out := filepath.Join(dir, format)
				run(t, "cloud-init", "devel", "net-convert", "-p", nc, "-k", "yaml", "-d", out, "-D", "debian", "-O", format)
				return out
			}

			eni := readFile(t, filepath.Join(convert("eni"), "etc/network/interfaces.d/50-cloud-init"))
			nd := convert("networkd")
			for _, ifc := range tc.id.Interfaces {
				id := "nic" + strings.ReplaceAll(strings.ToLower(strings.ReplaceAll(ifc.MAC, "-", "")), ":", "")
				stanza := eniStanzas(eni, id)
				networkd := readFile(t, filepath.Join(nd, "etc/systemd/network/10-cloud-init-"+id+".network"))
				var want, wantND []string
				if len(ifc.Addresses) == 0 {
					want = append(want, "iface "+id+" inet dhcp")
					wantND = append(wantND, "DHCP=ipv4")
				} else {
					wantND = append(wantND, "DHCP=no")
				}
				for _, p := range ifc.Addresses {
					fam := "inet"
					if p.Addr().Is6() {
						fam = "inet6"
					}
					want = append(want, "iface "+id+" "+fam+" static", "address "+p.String())
					wantND = append(wantND, "Address="+p.String())
				}
				if ifc.Gateway.IsValid() {
					want = append(want, "gateway "+ifc.Gateway.String())
					wantND = append(wantND, "Gateway="+ifc.Gateway.String())
				}
				var dns []string
				for _, d := range ifc.DNS {
					dns = append(dns, d.String())
				}
				if len(dns) > 0 {
					want = append(want, "dns-nameservers "+strings.Join(dns, " "))
					wantND = append(wantND, "DNS="+strings.Join(dns, " "))
				}
				if len(ifc.Search) > 0 {
					want = append(want, "dns-search "+strings.Join(ifc.Search, " "))
					wantND = append(wantND, "Domains="+strings.Join(ifc.Search, " "))
				}
				wantND = append(wantND, "MACAddress="+strings.ToLower(strings.ReplaceAll(ifc.MAC, "-", ":")))
				for _, w := range want {
					if !hasLine(stanza, w) {
						t.Errorf("ifupdown config of %s lacks %q:\n%s", id, w, eni)
					}
				}
				if !hasLine(eni, "auto "+id) {
					t.Errorf("ifupdown does not bring %s up at boot:\n%s", id, eni)
				}
				if strings.Contains(stanza, "route add") {
					t.Errorf("ifupdown config of %s uses route hooks:\n%s", id, stanza)
				}
				for _, w := range wantND {
					if !hasLine(networkd, w) {
						t.Errorf("networkd config of %s lacks %q:\n%s", id, w, networkd)
					}
				}
			}

			// netplan: cloud-init passes a v2 config through; it must be ours.
			var ours, theirs map[string]any
			if err := yaml.Unmarshal(s.NetworkConfig, &ours); err != nil {
				t.Fatal(err)
			}
			np := readFile(t, filepath.Join(convert("netplan"), "etc/netplan/50-cloud-init.yaml"))
			if err := yaml.Unmarshal([]byte(np), &theirs); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(theirs["network"], ours) {
				t.Errorf("netplan renders\n%s\nfrom\n%s", np, s.NetworkConfig)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eniStanzas returns the "iface NAME ..." stanzas of an interfaces file,
// with their option lines.
func eniStanzas(eni, name string) string {
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(eni))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, " ") {
			in = strings.HasPrefix(line, "iface "+name+" ")
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// hasFields reports whether a line of text has want's fields, however spaced.
func hasFields(text, want string) bool {
	w := strings.Join(strings.Fields(want), " ")
	for _, l := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(l), " ") == w {
			return true
		}
	}
	return false
}

func hasLine(text, want string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

// TestPeerImageTools: dosfstools finds nothing to fix in the image,
// libblkid (what udev and cloud-init's device search use) calls it vfat
// labelled CIDATA, and mtools reads each file back byte for byte.
func TestPeerImageTools(t *testing.T) {
	need(t, "fsck.fat", "blkid", "mcopy")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.id)
			img, err := s.Image()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "seed.img")
			write(t, path, img)

			out := run(t, "fsck.fat", "-n", "-V", path)
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				switch {
				case strings.HasPrefix(line, "fsck.fat "), line == "Starting check/repair pass.",
					line == "Starting verification pass.", strings.HasPrefix(line, path+": ") && strings.Contains(line, " files, "):
				default:
					t.Errorf("fsck.fat says %q", line)
				}
			}

			tags := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(string(run(t, "blkid", "-p", "-o", "export", path))), "\n") {
				k, v, _ := strings.Cut(l, "=")
				tags[k] = v
			}
			if tags["TYPE"] != "vfat" || tags["LABEL"] != "CIDATA" {
				t.Errorf("blkid -p: %v", tags)
			}

			for name, want := range seedFiles(s) {
				if got := run(t, "mcopy", "-n", "-i", path, "::"+name, "-"); !bytes.Equal(got, want) {
					t.Errorf("mcopy ::%s: %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestPeerCloudLocalds: cloud-image-utils' cloud-localds, given the same
// files, makes a vfat seed that holds the same names with the same bytes
// as ours (its filesystem differs: label case, timestamps, layout).
func TestPeerCloudLocalds(t *testing.T) {
	need(t, "cloud-localds", "mkfs.vfat", "mcopy", "mdir")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.id)
			dir := t.TempDir()
			args := []string{"-f", "vfat", "-V", filepath.Join(dir, "vendor-data")}
			if s.NetworkConfig != nil {
				args = append(args, "-N", filepath.Join(dir, "network-config"))
			}
			for name, b := range seedFiles(s) {
				write(t, filepath.Join(dir, name), b)
			}
			theirs := filepath.Join(dir, "localds.img")
			run(t, "cloud-localds", append(args, theirs, filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data"))...)
			img, err := s.Image()
			if err != nil {
				t.Fatal(err)
			}
			ours := filepath.Join(dir, "ours.img")
			write(t, ours, img)

			if a, b := longNames(t, ours), longNames(t, theirs); !reflect.DeepEqual(a, b) {
				t.Errorf("our image holds %q, cloud-localds's %q", a, b)
			}
			for name := range seedFiles(s) {
				a := run(t, "mcopy", "-n", "-i", ours, "::"+name, "-")
				b := run(t, "mcopy", "-n", "-i", theirs, "::"+name, "-")
				if !bytes.Equal(a, b) {
					t.Errorf("%s: ours %q, cloud-localds's %q", name, a, b)
				}
			}
		})
	}
}

// longNames lists an image's files by long name, sorted, via mtools.
func longNames(t *testing.T, img string) []string {
	t.Helper()
	// -b: bare listing, one path per line ("::/name").
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(run(t, "mdir", "-b", "-i", img, "::"))), "\n") {
		names = append(names, strings.TrimPrefix(l, "::/"))
	}
	slices.Sort(names)
	return names
}

// cloudInitPython is the interpreter cloud-init runs under (its shebang),
// so the tests import the same cloudinit package the tool uses.
func cloudInitPython(t *testing.T) string {
	t.Helper()
	need(t, "cloud-init")
	path, _ := exec.LookPath("cloud-init")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	py := strings.TrimSpace(strings.TrimPrefix(line, "#!"))
	if py == "" || strings.Contains(py, " ") {
		t.Skipf("cloud-init's interpreter line %q is not a plain path", line)
	}
	return py
}

// TestPeerNoCloudDatasource: cloud-init's NoCloud datasource, given the
// files copied out of our image (mtools: the kernel's vfat is not there to
// mount it), reads the instance-id, the host name, the SSH keys, the
// user-data, the vendor-data and the network config rackd meant; and its
// update_etc_hosts module, run with that vendor-data, maps the FQDN in a
// copy of Debian's /etc/hosts.
func TestPeerNoCloudDatasource(t *testing.T) {
	py := cloudInitPython(t)
	need(t, "mcopy")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := render(t, tc.id)
			img, err := s.Image()
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "seed.img")
			write(t, path, img)
			seedDir := filepath.Join(dir, "cloud", "seed", "nocloud")
			if err := os.MkdirAll(seedDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name := range seedFiles(s) {
				run(t, "mcopy", "-n", "-i", path, "::"+name, filepath.Join(seedDir, name))
			}
			// Debian's /etc/hosts as the image ships it, plus an operator's line.
			hosts := filepath.Join(dir, "hosts")
			write(t, hosts, []byte(debianHosts))
			out := run(t, py, filepath.Join("testdata", "nocloud_datasource.py"), filepath.Join(dir, "cloud"), hosts)
			var got struct {
				Short         string         `json:"short_hostname"`
				FQDN          string         `json:"fqdn"`
				Hosts         string         `json:"hosts"`
				InstanceID    string         `json:"instance_id"`
				Hostname      string         `json:"hostname"`
				PublicKeys    []string       `json:"public_keys"`
				UserData      string         `json:"userdata_raw"`
				VendorData    string         `json:"vendordata_raw"`
				NetworkConfig map[string]any `json:"network_config"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got.InstanceID != tc.id.InstanceID || got.Hostname != tc.id.Hostname {
				t.Errorf("cloud-init reads instance-id %q, hostname %q", got.InstanceID, got.Hostname)
			}
			if len(got.PublicKeys) != len(tc.keys) || len(tc.keys) > 0 && !reflect.DeepEqual(got.PublicKeys, tc.keys) {
				t.Errorf("cloud-init reads keys %q, want %q", got.PublicKeys, tc.keys)
			}
			if got.UserData != string(s.UserData) || got.VendorData != string(s.VendorData) {
				t.Errorf("cloud-init reads user-data %q, vendor-data %q", got.UserData, got.VendorData)
			}
			// manage_etc_hosts: localhost maps the FQDN (what `hostname -f`
			// answers) and keeps the rest of the file.
			short, _, _ := strings.Cut(tc.id.Hostname, ".")
			if got.Short != short || got.FQDN != tc.id.Hostname {
				t.Errorf("cloud-init derives host name %q, FQDN %q", got.Short, got.FQDN)
			}
			if !hasFields(got.Hosts, "127.0.1.1 "+tc.id.Hostname+" "+short) {
				t.Errorf("update_etc_hosts does not map the FQDN:\n%s", got.Hosts)
			}
			for _, l := range strings.Split(strings.TrimSpace(debianHosts), "\n") {
				if !hasFields(got.Hosts, l) {
					t.Errorf("update_etc_hosts lost %q:\n%s", l, got.Hosts)
				}
			}
			var want map[string]any
			if s.NetworkConfig != nil {
				if err := yaml.Unmarshal(s.NetworkConfig, &want); err != nil {
					t.Fatal(err)
				}
			}
			if !jsonEqual(t, got.NetworkConfig, want) {
				t.Errorf("cloud-init reads network config %v, want %v", got.NetworkConfig, want)
			}
		})
	}
}

const debianHosts = `127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
10.9.9.9	backup.example
`

// jsonEqual compares two decoded documents after a JSON round trip, which
// makes their number and map types the same.
func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	norm := func(v any) any {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		if err := json.Unmarshal(j, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestPeerMergeUserDataWins: what the package documentation promises about
// the user's cloud-config, checked with cloud-init's own config merger:
// where both set a key the user's value wins, sub-keys the user leaves out
// come from rackd's, and a reporting handler of the user's own name sits
// beside rackd's.
func TestPeerMergeUserDataWins(t *testing.T) {
	py := cloudInitPython(t)
	s := render(t, cases[0].id)
	dir := t.TempDir()
	inst := filepath.Join(dir, "cloud", "instance")
	if err := os.MkdirAll(inst, 0o755); err != nil {
		t.Fatal(err)
	}
	// Where cloud-init's handlers leave the user's and the vendor's
	// cloud-config of the instance.
	write(t, filepath.Join(inst, "cloud-config.txt"), []byte("#cloud-config\nphone_home: {url: \"http://user.example/ph\", post: all}\nreporting: {mine: {type: log}}\n"))
	write(t, filepath.Join(inst, "vendor-cloud-config.txt"), s.VendorData)
	out := run(t, py, filepath.Join("testdata", "merge_config.py"), filepath.Join(dir, "cloud"))
	var cfg struct {
		PhoneHome struct {
			URL   string `json:"url"`
			Post  any    `json:"post"`
			Tries int    `json:"tries"`
		} `json:"phone_home"`
		Reporting map[string]map[string]any `json:"reporting"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if cfg.PhoneHome.URL != "http://user.example/ph" || cfg.PhoneHome.Post != "all" || cfg.PhoneHome.Tries != 10 {
		t.Errorf("phone_home merged into %+v, want the user's url and post with rackd's tries", cfg.PhoneHome)
	}
	if cfg.Reporting["rackd"]["endpoint"] != cases[0].id.EventsURL || cfg.Reporting["mine"]["type"] != "log" {
		t.Errorf("reporting merged into %v, want rackd's webhook and the user's log", cfg.Reporting)
	}
}
