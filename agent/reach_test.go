package agent

import (
	"net"
	"strings"
	"testing"
)

// TestBootReachWarnings: with DHCP on, HTTP or TFTP out of the machines'
// reach is warned about, naming the setting that fixes it; with DHCP off,
// or everything reachable, nothing is said.
func TestBootReachWarnings(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	tests := []struct {
		name  string
		tweak func(*Config)
		http  string
		want  []string // substrings, one per warning, in order
	}{
		{"dhcp off", func(c *Config) {}, "127.0.0.1:5240", nil},
		{"all reachable", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"}; c.TFTP.Listen = "0.0.0.0:69" }, "0.0.0.0:5240", nil},
		{"all reachable, v6 wildcard", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"}; c.TFTP.Listen = ":69" }, "[::]:5240", nil},
		{"http on loopback", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"}; c.TFTP.Listen = "0.0.0.0:69" }, "127.0.0.1:5240",
			[]string{`loopback only (127.0.0.1:5240): machines cannot fetch their boot configs or report back. Fix: listen = "0.0.0.0:5240"`}},
		{"http on v6 loopback, relay only", func(c *Config) { c.DHCP.Listen = []string{"10.0.0.1"}; c.TFTP.Listen = "10.0.0.1:69" }, "[::1]:5240",
			[]string{`--listen 0.0.0.0:5240`}},
		{"http on loopback behind a proxy", func(c *Config) {
			c.DHCP.Interfaces = []string{"eth1"}
			c.TFTP.Listen = "0.0.0.0:69"
			c.DHCP.HTTPURL = "http://10.0.0.1:80"
		}, "127.0.0.1:5240", nil},
		{"tftp off", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"} }, "0.0.0.0:5240",
			[]string{`TFTP is off: BIOS and UEFI PXE firmware fetch their loader over TFTP`}},
		{"tftp on loopback", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"}; c.TFTP.Listen = "localhost:69" }, "10.0.0.1:5240",
			[]string{`TFTP listens on loopback only (localhost:69)`}},
		{"both", func(c *Config) { c.DHCP.Interfaces = []string{"eth1"} }, "127.0.0.1:5240",
			[]string{`HTTP (boot files`, `TFTP is off`}},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.tweak(&cfg)
		got := bootReachWarnings(cfg, tcp(tt.http))
		if len(got) != len(tt.want) {
			t.Errorf("%s: %d warnings %q, want %d", tt.name, len(got), got, len(tt.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("%s: warning %d %q, want it to say %q", tt.name, i, got[i], tt.want[i])
			}
		}
	}
}
