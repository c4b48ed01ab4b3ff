package nocloud

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"rackd/nocloud/internal/vfat"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// testKey is an authorized_keys line of an ed25519 key made from seed, so
// the tests need no key material on disk and the golden files stay fixed.
func testKey(seed byte, comment string) string {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		panic(err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if comment != "" {
		line += " " + comment
	}
	return line
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

const (
	phoneHome = "http://10.0.0.1:8080/metadata/v1/os/m1.os.0123abcd/phone-home"
	events    = "http://10.0.0.1:8080/metadata/v1/os/m1.os.0123abcd/events"
)

// cases are the golden identities: testdata/<name>/ holds their rendered
// files and the sha256 of their image.
var cases = []struct {
	name string
	id   Identity
	keys []string // the public-keys meta-data must list
}{
	{
		name: "single-nic",
		id: Identity{
			InstanceID: "i-3f2a9c0d1e4b5a6f",
			Hostname:   "node1.rack.example",
			SSHKeys:    []string{testKey(1, "alice@laptop")},
			Interfaces: []Interface{{
				MAC:       "02:00:00:0a:00:05",
				Addresses: []netip.Prefix{pfx("10.0.0.5/24")},
				Gateway:   addr("10.0.0.1"),
				DNS:       []netip.Addr{addr("10.0.0.2")},
				Search:    []string{"rack.example"},
			}},
			PhoneHomeURL: phoneHome, EventsURL: events,
		},
		keys: []string{testKey(1, "alice@laptop")},
	},
	{
		name: "dual-stack-two-nics",
		id: Identity{
			InstanceID: "i-dual",
			Hostname:   "db-7.east.rack.example",
			SSHKeys:    []string{testKey(2, "bob"), testKey(3, "")},
			Interfaces: []Interface{
				{
					MAC:       "02:00:00:0a:00:07",
					Addresses: []netip.Prefix{pfx("10.0.0.7/24"), pfx("2001:db8:1::7/64")},
					Gateway:   addr("10.0.0.1"),
					DNS:       []netip.Addr{addr("10.0.0.2"), addr("2001:db8:1::53")},
					Search:    []string{"east.rack.example", "rack.example"},
				},
				{
					MAC:       "02:00:00:0B:00:07", // upper case in, lower case out
					Addresses: []netip.Prefix{pfx("2001:db8:2::7/64")},
					Gateway:   addr("fe80::1"),
				},
			},
			PhoneHomeURL: "https://rackd.example:8443/metadata/v1/os/t/phone-home",
			EventsURL:    "https://rackd.example:8443/metadata/v1/os/t/events",
		},
		keys: []string{testKey(2, "bob"), testKey(3, "")},
	},
	{
		name: "dhcp-nic-script-user-data",
		id: Identity{
			InstanceID: "0b7e4f3c-2d1a-4e5f-9a8b-7c6d5e4f3a2b",
			Hostname:   "web.lab",
			SSHKeys: []string{
				`from="10.0.0.0/8",no-agent-forwarding ` + testKey(4, "josé@portátil"),
				testKey(4, "the same key again, another comment"),
				testKey(5, `quote " and backslash \ in a comment`),
			},
			UserData:     []byte("#!/bin/sh\necho 'hello from user-data' > /var/tmp/marker\n"),
			Interfaces:   []Interface{{MAC: "02-00-00-0c-00-01"}},
			PhoneHomeURL: phoneHome, EventsURL: events,
		},
		keys: []string{
			`from="10.0.0.0/8",no-agent-forwarding ` + testKey(4, "josé@portátil"),
			testKey(5, `quote " and backslash \ in a comment`),
		},
	},
	{
		name: "no-interfaces-no-keys",
		id: Identity{
			InstanceID:   "i-bare",
			Hostname:     "bare.rack.example",
			UserData:     []byte("#cloud-config\nruncmd:\n  - [touch, /var/tmp/marker]\n"),
			PhoneHomeURL: phoneHome, EventsURL: events,
		},
	},
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed, err := Render(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			img, err := seed.Image()
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(img)
			files := map[string][]byte{
				"meta-data":    seed.MetaData,
				"user-data":    seed.UserData,
				"vendor-data":  seed.VendorData,
				"image.sha256": []byte(hex.EncodeToString(sum[:]) + "\n"),
			}
			if seed.NetworkConfig != nil {
				files["network-config"] = seed.NetworkConfig
			}
			dir := filepath.Join("testdata", tc.name)
			if *update {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, b := range files {
					if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("%v (run go test ./nocloud -update to write the golden files)", err)
			}
			if len(ents) != len(files) {
				t.Errorf("%s holds %d files, the seed has %d", dir, len(ents), len(files))
			}
			for name, got := range files {
				want, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Errorf("%v", err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s:\n%s\nwant:\n%s", name, dir, got, want)
				}
			}
			checkSeed(t, tc.id, tc.keys, seed)
			checkImage(t, seed, img)
		})
	}
}

// checkSeed reads the seed back with a YAML parser and checks it says what
// the identity says: independent of the golden bytes.
func checkSeed(t *testing.T, id Identity, keys []string, s Seed) {
	t.Helper()
	var md struct {
		InstanceID    string   `yaml:"instance-id"`
		LocalHostname string   `yaml:"local-hostname"`
		PublicKeys    []string `yaml:"public-keys"`
	}
	strictYAML(t, "meta-data", s.MetaData, &md)
	if md.InstanceID != id.InstanceID || md.LocalHostname != id.Hostname {
		t.Errorf("meta-data says instance-id %q, local-hostname %q", md.InstanceID, md.LocalHostname)
	}
	if len(keys) == 0 {
		keys = nil
	}
	if len(md.PublicKeys) == 0 {
		md.PublicKeys = nil
	}
	if !reflect.DeepEqual(md.PublicKeys, keys) {
		t.Errorf("public-keys %q, want %q", md.PublicKeys, keys)
	}

	wantUD := id.UserData
	if len(wantUD) == 0 {
		wantUD = []byte(emptyUserData)
	}
	if !bytes.Equal(s.UserData, wantUD) {
		t.Errorf("user-data changed: %q", s.UserData)
	}

	if !bytes.HasPrefix(s.VendorData, []byte("#cloud-config\n")) {
		t.Errorf("vendor-data does not start with #cloud-config")
	}
	var vd struct {
		ManageEtcHosts string `yaml:"manage_etc_hosts"`
		PhoneHome      struct {
			URL   string   `yaml:"url"`
			Post  []string `yaml:"post"`
			Tries int      `yaml:"tries"`
		} `yaml:"phone_home"`
		Reporting map[string]struct {
			Type     string `yaml:"type"`
			Endpoint string `yaml:"endpoint"`
			Timeout  int    `yaml:"timeout"`
			Retries  int    `yaml:"retries"`
		} `yaml:"reporting"`
	}
	strictYAML(t, "vendor-data", s.VendorData, &vd)
	if vd.PhoneHome.URL != id.PhoneHomeURL || !reflect.DeepEqual(vd.PhoneHome.Post, []string{"instance_id", "hostname", "fqdn"}) || vd.PhoneHome.Tries != 10 {
		t.Errorf("phone_home %+v", vd.PhoneHome)
	}
	if r := vd.Reporting["rackd"]; len(vd.Reporting) != 1 || r.Type != "webhook" || r.Endpoint != id.EventsURL || r.Timeout <= 0 {
		t.Errorf("reporting %+v", vd.Reporting)
	}
	if vd.ManageEtcHosts != "localhost" {
		t.Errorf("manage_etc_hosts %q", vd.ManageEtcHosts)
	}

	if len(id.Interfaces) == 0 {
		if s.NetworkConfig != nil {
			t.Errorf("network-config without interfaces: %s", s.NetworkConfig)
		}
		return
	}
	type nic struct {
		Match struct {
			MACAddress string `yaml:"macaddress"`
		} `yaml:"match"`
		DHCP4       *bool    `yaml:"dhcp4"`
		DHCP6       *bool    `yaml:"dhcp6"`
		Addresses   []string `yaml:"addresses"`
		Gateway4    string   `yaml:"gateway4"`
		Gateway6    string   `yaml:"gateway6"`
		Nameservers struct {
			Addresses []string `yaml:"addresses"`
			Search    []string `yaml:"search"`
		} `yaml:"nameservers"`
	}
	var nc struct {
		Version   int            `yaml:"version"`
		Ethernets map[string]nic `yaml:"ethernets"`
	}
	strictYAML(t, "network-config", s.NetworkConfig, &nc)
	if nc.Version != 2 || len(nc.Ethernets) != len(id.Interfaces) {
		t.Fatalf("network-config version %d with %d ethernets", nc.Version, len(nc.Ethernets))
	}
	for _, ifc := range id.Interfaces {
		mac := strings.ToLower(strings.ReplaceAll(ifc.MAC, "-", ":"))
		n, ok := nc.Ethernets["nic"+strings.ReplaceAll(mac, ":", "")]
		if !ok {
			t.Errorf("no ethernet keyed by %s's id", mac)
			continue
		}
		if n.Match.MACAddress != mac {
			t.Errorf("%s matched by %q", mac, n.Match.MACAddress)
		}
		var want []string
		for _, p := range ifc.Addresses {
			want = append(want, p.String())
		}
		if !reflect.DeepEqual(n.Addresses, want) {
			t.Errorf("%s: addresses %q, want %q", mac, n.Addresses, want)
		}
		if n.DHCP4 == nil || *n.DHCP4 != (len(want) == 0) {
			t.Errorf("%s: dhcp4 %v with %d addresses", mac, n.DHCP4, len(want))
		}
		gw := n.Gateway4 + n.Gateway6
		if ifc.Gateway.IsValid() != (gw != "") || ifc.Gateway.IsValid() && (gw != ifc.Gateway.String() || (n.Gateway4 != "") != ifc.Gateway.Is4()) {
			t.Errorf("%s: gateway4 %q gateway6 %q, want %v", mac, n.Gateway4, n.Gateway6, ifc.Gateway)
		}
		var dns []string
		for _, d := range ifc.DNS {
			dns = append(dns, d.String())
		}
		if !reflect.DeepEqual(n.Nameservers.Addresses, dns) && len(dns)+len(n.Nameservers.Addresses) > 0 {
			t.Errorf("%s: nameservers %q, want %q", mac, n.Nameservers.Addresses, dns)
		}
		if !reflect.DeepEqual(n.Nameservers.Search, ifc.Search) && len(ifc.Search)+len(n.Nameservers.Search) > 0 {
			t.Errorf("%s: search %q, want %q", mac, n.Nameservers.Search, ifc.Search)
		}
	}
}

// strictYAML decodes b into v, refusing keys v does not name.
func strictYAML(t *testing.T, name string, b []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s does not parse: %v\n%s", name, err, b)
	}
}

// checkImage reads the image back and finds the seed's files in it.
func checkImage(t *testing.T, s Seed, img []byte) {
	t.Helper()
	if len(img) == 0 || len(img)%(1<<20) != 0 {
		t.Fatalf("image of %d bytes is not a whole number of MiB", len(img))
	}
	label, files, err := vfat.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if label != "CIDATA" {
		t.Errorf("label %q", label)
	}
	want := []vfat.File{{Name: "meta-data", Data: s.MetaData}, {Name: "user-data", Data: s.UserData}, {Name: "vendor-data", Data: s.VendorData}}
	if s.NetworkConfig != nil {
		want = append(want, vfat.File{Name: "network-config", Data: s.NetworkConfig})
	}
	if len(files) != len(want) {
		t.Fatalf("image holds %d files, want %d", len(files), len(want))
	}
	for i := range want {
		if files[i].Name != want[i].Name || !bytes.Equal(files[i].Data, want[i].Data) {
			t.Errorf("image file %d is %q (%d bytes), want %q (%d bytes)", i, files[i].Name, len(files[i].Data), want[i].Name, len(want[i].Data))
		}
	}
}

func good() Identity {
	id := cases[0].id
	id.Interfaces = []Interface{{
		MAC:       "02:00:00:0a:00:05",
		Addresses: []netip.Prefix{pfx("10.0.0.5/24")},
		Gateway:   addr("10.0.0.1"),
		DNS:       []netip.Addr{addr("10.0.0.2")},
		Search:    []string{"rack.example"},
	}}
	return id
}

func TestRenderRefuses(t *testing.T) {
	key := testKey(1, "k")
	for _, tc := range []struct {
		name   string
		change func(*Identity)
		want   string
	}{
		{"empty instance-id", func(id *Identity) { id.InstanceID = "" }, "instance-id is empty"},
		{"slash in instance-id", func(id *Identity) { id.InstanceID = "i/../x" }, `character 2 ('/')`},
		{"instance-id starts with a dot", func(id *Identity) { id.InstanceID = ".hidden" }, "not first"},
		{"long instance-id", func(id *Identity) { id.InstanceID = strings.Repeat("a", 129) }, "at most 128"},
		{"short hostname", func(id *Identity) { id.Hostname = "node1" }, "not a fully qualified name"},
		{"empty label", func(id *Identity) { id.Hostname = "node1..example" }, "empty label"},
		{"trailing dot", func(id *Identity) { id.Hostname = "node1.example." }, "empty label"},
		{"underscore", func(id *Identity) { id.Hostname = "node_1.example" }, `has '_'`},
		{"hyphen", func(id *Identity) { id.Hostname = "-node.example" }, "hyphen"},
		{"long label", func(id *Identity) { id.Hostname = strings.Repeat("a", 64) + ".example" }, "longer than 63"},
		{"numeric TLD", func(id *Identity) { id.Hostname = "10.0.0.5" }, "all digits"},
		{"newline in hostname", func(id *Identity) { id.Hostname = "a.b\nc" }, `has '\n'`},
		{"two-line key", func(id *Identity) { id.SSHKeys = []string{key + "\n" + key} }, "SSH key 1: holds a line break"},
		{"garbage key", func(id *Identity) { id.SSHKeys = []string{key, "ssh-rsa AAAAnotakey"} }, "SSH key 2: not an authorized_keys line"},
		{"empty key", func(id *Identity) { id.SSHKeys = []string{""} }, "SSH key 1"},
		{"control character in key", func(id *Identity) { id.SSHKeys = []string{key + " a\x00b"} }, "control character"},
		{"user-data too large", func(id *Identity) { id.UserData = make([]byte, MaxUserData+1) }, "at most 1048576"},
		{"no phone-home URL", func(id *Identity) { id.PhoneHomeURL = "" }, "phone-home URL: missing"},
		{"ftp URL", func(id *Identity) { id.EventsURL = "ftp://10.0.0.1/x" }, "events URL: \"ftp://10.0.0.1/x\": the scheme"},
		{"relative URL", func(id *Identity) { id.EventsURL = "/metadata/v1/os/t/events" }, "the scheme"},
		{"URL without host", func(id *Identity) { id.EventsURL = "http:///x" }, "no host"},
		{"URL with a space", func(id *Identity) { id.PhoneHomeURL = "http://a/b c" }, "character 11"},
		{"URL with user", func(id *Identity) { id.PhoneHomeURL = "http://u:p@a/b" }, "user information"},
		{"URL with fragment", func(id *Identity) { id.PhoneHomeURL = "http://a/b#c" }, "fragment"},
		{"bad MAC", func(id *Identity) { id.Interfaces[0].MAC = "02:00:00:0a:00" }, "interface 1: MAC"},
		{"long MAC", func(id *Identity) { id.Interfaces[0].MAC = "02:00:00:0a:00:05:06:07" }, "not a 48-bit"},
		{"multicast MAC", func(id *Identity) { id.Interfaces[0].MAC = "01:00:5e:00:00:01" }, "multicast"},
		{"same MAC twice", func(id *Identity) {
			id.Interfaces = append(id.Interfaces, Interface{MAC: "02:00:00:0A:00:05"})
		}, "interface 2: MAC 02:00:00:0a:00:05 is also interface 1's"},
		{"invalid prefix", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{{}} }, "not a valid address/prefix"},
		{"network address", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{pfx("10.0.0.0/24")} }, "network address of 10.0.0.0/24"},
		{"broadcast address", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{pfx("10.0.0.255/24")} }, "broadcast address"},
		{"IPv6 subnet-router", func(id *Identity) {
			id.Interfaces[0].Addresses = append(id.Interfaces[0].Addresses, pfx("2001:db8::/64"))
		}, "network address of 2001:db8::/64"},
		{"loopback", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{pfx("127.0.0.5/8")} }, "not a unicast host"},
		{"mapped", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{pfx("::ffff:10.0.0.5/120")} }, "IPv4-mapped"},
		{"slash zero", func(id *Identity) { id.Interfaces[0].Addresses = []netip.Prefix{pfx("10.0.0.5/0")} }, "/0"},
		{"same address twice", func(id *Identity) {
			id.Interfaces = append(id.Interfaces, Interface{MAC: "02:00:00:00:00:09", Addresses: []netip.Prefix{pfx("10.0.0.5/16")}})
		}, "also on interface 1"},
		{"gateway off-link", func(id *Identity) { id.Interfaces[0].Gateway = addr("10.0.1.1") }, "not a host address in any"},
		{"gateway is the network", func(id *Identity) { id.Interfaces[0].Gateway = addr("10.0.0.0") }, "not a host address in any"},
		{"gateway is us", func(id *Identity) { id.Interfaces[0].Gateway = addr("10.0.0.5") }, "own address"},
		{"gateway with zone", func(id *Identity) { id.Interfaces[0].Gateway = addr("fe80::1%eth0") }, "zone"},
		{"IPv6 gateway without IPv6", func(id *Identity) { id.Interfaces[0].Gateway = addr("fe80::1") }, "without an IPv6 address"},
		{"gateway on DHCP", func(id *Identity) { id.Interfaces[0].Addresses = nil }, "no static address"},
		{"two IPv4 default routes", func(id *Identity) {
			id.Interfaces = append(id.Interfaces, Interface{MAC: "02:00:00:00:00:09", Addresses: []netip.Prefix{pfx("10.1.0.5/24")}, Gateway: addr("10.1.0.1")})
		}, "interface 2: gateway 10.1.0.1: interface 1 already has the default IPv4 route"},
		{"DNS unspecified", func(id *Identity) { id.Interfaces[0].DNS = []netip.Addr{addr("0.0.0.0")} }, "DNS server"},
		{"DNS invalid", func(id *Identity) { id.Interfaces[0].DNS = []netip.Addr{{}} }, "DNS server"},
		{"search domain", func(id *Identity) { id.Interfaces[0].Search = []string{"a b"} }, `search domain "a b"`},
		{"empty search domain", func(id *Identity) { id.Interfaces[0].Search = []string{""} }, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := good()
			tc.change(&id)
			_, err := Render(id)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestRenderAccepts: edge inputs that are fine.
func TestRenderAccepts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Identity)
	}{
		{"point-to-point /31", func(id *Identity) {
			id.Interfaces[0].Addresses = []netip.Prefix{pfx("10.0.0.0/31")}
			id.Interfaces[0].Gateway = addr("10.0.0.1")
		}},
		{"single address", func(id *Identity) {
			id.Interfaces[0].Addresses = []netip.Prefix{pfx("10.0.0.5/32")}
			id.Interfaces[0].Gateway = netip.Addr{}
		}},
		{"largest user-data", func(id *Identity) { id.UserData = bytes.Repeat([]byte("#"), MaxUserData) }},
		{"upper case hostname", func(id *Identity) { id.Hostname = "Node1.Rack.Example" }},
		{"IPv4 and IPv6 routes on two interfaces", func(id *Identity) {
			id.Interfaces = append(id.Interfaces, Interface{MAC: "02:00:00:00:00:09", Addresses: []netip.Prefix{pfx("2001:db8::5/64")}, Gateway: addr("2001:db8::1")})
		}},
		{"no interfaces", func(id *Identity) { id.Interfaces = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := good()
			tc.change(&id)
			s, err := Render(id)
			if err != nil {
				t.Fatal(err)
			}
			checkSeed(t, id, []string{testKey(1, "alice@laptop")}, s)
			img, err := s.Image()
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, s, img)
		})
	}
}

func TestImage(t *testing.T) {
	s, err := Render(good())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Image()
	b, _ := s.Image()
	if len(a) != 1<<20 || !bytes.Equal(a, b) {
		t.Errorf("two images of one seed: %d and %d bytes, equal %v", len(a), len(b), bytes.Equal(a, b))
	}
	other := good()
	other.InstanceID = "i-another"
	s2, _ := Render(other)
	c, _ := s2.Image()
	if bytes.Equal(a[39:43], c[39:43]) {
		t.Errorf("two deployments' seeds share volume id % x", a[39:43])
	}

	large := good()
	large.UserData = bytes.Repeat([]byte("x"), MaxUserData)
	s3, _ := Render(large)
	d, err := s3.Image()
	if err != nil || len(d) != 2<<20 {
		t.Errorf("seed with 1 MiB of user-data: %d bytes, err %v; want 2 MiB", len(d), err)
	}

	for _, bad := range []Seed{{}, {MetaData: []byte("x")}} {
		if _, err := bad.Image(); err == nil {
			t.Errorf("Image of %+v: no error", bad)
		}
	}
}

func TestQuote(t *testing.T) {
	for _, s := range []string{"", "plain", `"`, `\`, "a: b", "- x", "#c", "null", "true", "0x10", "~", "tab\there", "nl\nnl",
		"\x00\x01\x7f", "é", "\u2028\u0085", "😀", "'single'", "{flow}", "[seq]", "&anchor *alias", "!tag", "%dir", "@", "`"} {
		var v struct{ K string }
		if err := yaml.Unmarshal([]byte("k: "+quote(s)+"\n"), &v); err != nil {
			t.Errorf("%q -> %s: %v", s, quote(s), err)
			continue
		}
		if v.K != s {
			t.Errorf("%q -> %s -> %q", s, quote(s), v.K)
		}
		if strings.ContainsAny(quote(s), "\n\r") {
			t.Errorf("%q quoted over two lines", s)
		}
	}
}

func FuzzQuote(f *testing.F) {
	f.Add("a\"b\\c\n")
	f.Add("\u2029é\x00")
	f.Fuzz(func(t *testing.T, s string) {
		q := quote(s)
		for i := 0; i < len(q); i++ {
			if q[i] < 0x20 || q[i] >= 0x7f {
				t.Fatalf("%q: quoted form has byte %#x", s, q[i])
			}
		}
		var v struct{ K string }
		if err := yaml.Unmarshal([]byte("k: "+q+"\n"), &v); err != nil {
			t.Fatalf("%q -> %s: %v", s, q, err)
		}
		want := string([]rune(s)) // each invalid byte becomes U+FFFD
		if v.K != want {
			t.Fatalf("%q -> %s -> %q", s, q, v.K)
		}
	})
}

// FuzzRender: any input is either refused or rendered into files a YAML
// parser reads back as that input, in an image that reads back whole.
func FuzzRender(f *testing.F) {
	f.Add("i-1", "node1.rack.example", testKey(1, "c"), "02:00:00:0a:00:05", "10.0.0.5/24", "10.0.0.1", "10.0.0.2", "rack.example", phoneHome, []byte("#cloud-config\n"))
	f.Add("x", "a.b", `command="echo \"hi\"" `+testKey(2, "é"), "02-00-00-0A-00-05", "2001:db8::5/64", "fe80::1", "::1", "b", "https://h/p?q=1&r=\"2\"", []byte{})
	f.Add("i-1", "a.b.c", "ssh-ed25519 AAAA", "zz", "10.0.0.0/24", "", "", "", "http://h", []byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, instanceID, hostname, key, mac, prefix, gateway, dns, search, url string, userData []byte) {
		id := Identity{
			InstanceID:   instanceID,
			Hostname:     hostname,
			SSHKeys:      []string{key},
			UserData:     userData,
			PhoneHomeURL: url,
			EventsURL:    url + "/events",
		}
		ifc := Interface{MAC: mac}
		if p, err := netip.ParsePrefix(prefix); err == nil {
			ifc.Addresses = []netip.Prefix{p}
		}
		ifc.Gateway, _ = netip.ParseAddr(gateway)
		if d, err := netip.ParseAddr(dns); err == nil {
			ifc.DNS = []netip.Addr{d}
		}
		if search != "" {
			ifc.Search = []string{search}
		}
		id.Interfaces = []Interface{ifc}
		s, err := Render(id)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		checkSeed(t, id, []string{strings.TrimSpace(key)}, s)
		img, err := s.Image()
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, s, img)
	})
}

func ExampleRender() {
	seed, err := Render(Identity{
		InstanceID: "i-example",
		Hostname:   "node1.rack.example",
		Interfaces: []Interface{{
			MAC:       "02:00:00:0a:00:05",
			Addresses: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")},
			Gateway:   netip.MustParseAddr("10.0.0.1"),
		}},
		PhoneHomeURL: "http://10.0.0.1:8080/metadata/v1/os/TOKEN/phone-home",
		EventsURL:    "http://10.0.0.1:8080/metadata/v1/os/TOKEN/events",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	img, _ := seed.Image()
	fmt.Printf("%s%d bytes\n", seed.NetworkConfig, len(img))
	// Output:
	// version: 2
	// ethernets:
	//   nic0200000a0005:
	//     match:
	//       macaddress: "02:00:00:0a:00:05"
	//     dhcp4: false
	//     dhcp6: false
	//     addresses:
	//       - "10.0.0.5/24"
	//     gateway4: "10.0.0.1"
	// 1048576 bytes
}
