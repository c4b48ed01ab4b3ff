package power

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// The BMC address forms HOST and HOST:PORT, and the mistakes operators make
// typing them.
func TestSplitHostPort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
		err  string // a part of the error; "" for none
	}{
		{in: "10.0.0.1", host: "10.0.0.1", port: 623},
		{in: "10.0.0.1:6230", host: "10.0.0.1", port: 6230},
		{in: "10.0.0.1:65535", host: "10.0.0.1", port: 65535},
		{in: "bmc-1.example", host: "bmc-1.example", port: 623},
		{in: "bmc_1:623", host: "bmc_1", port: 623},
		{in: "[fd00::1]:624", host: "fd00::1", port: 624},
		{in: "fd00::1", host: "fd00::1", port: 623},
		{in: "[fd00::1]", host: "fd00::1", port: 623},
		{in: "", err: "no BMC address"},
		{in: "10.0.0.1:99999", err: `port "99999": want a number from 1 to 65535`},
		{in: "10.0.0.1:0", err: "from 1 to 65535"},
		{in: "10.0.0.1:-1", err: "from 1 to 65535"},
		{in: "10.0.0.1:+80", err: "from 1 to 65535"},
		{in: "10.0.0.1:", err: "from 1 to 65535"},
		{in: "10.0.0.1:x", err: "from 1 to 65535"},
		{in: "10.0.0.300", err: "neither an IP address nor a DNS name"},
		{in: "10.0.0.1:623:1", err: "in brackets"},
		{in: "https://10.0.0.1", err: "no scheme"},
		{in: "10.0.0.1/24", err: "no scheme, path or user"},
		{in: "admin@10.0.0.1", err: "no scheme, path or user"},
		{in: ":623", err: "no host"},
		{in: "-bmc", err: "neither an IP address nor a DNS name"},
		{in: "bmc..example", err: "neither an IP address nor a DNS name"},
		{in: "[fe80::1%eth0]:623", err: "zone"},
	} {
		host, port, err := SplitHostPort(tc.in, 623)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SplitHostPort(%q) = %q, %d, %v; want an error with %q", tc.in, host, port, err, tc.err)
			}
			continue
		}
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("SplitHostPort(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
		}
	}
}

// Whatever an operator types, an accepted address has a port in range and a
// host that joins back into an address that parses to the same host and port.
func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1:99999", "[fd00::1]:623", "fd00::1", "bmc.example:623", "a:b:c", "[x]:1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		host, port, err := SplitHostPort(in, 623)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if port < 1 || port > 65535 || host == "" {
			t.Fatalf("SplitHostPort(%q) = %q, %d", in, host, port)
		}
		h2, p2, err := SplitHostPort(net.JoinHostPort(host, strconv.Itoa(port)), 623)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("SplitHostPort(%q) = %q, %d; joined again: %q, %d, %v", in, host, port, h2, p2, err)
		}
	})
}
