package agent

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// dig asks the agent's DNS server with the real dig and returns its short
// answer and the status line.
func dig(t *testing.T, ta *testAgent, args ...string) (answer, status string) {
	t.Helper()
	digPath := netnstest.Tool(t, "dig")
	addr := ta.dns.Addr()
	full := append([]string{"@" + addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port())), "+tries=1", "+time=2"}, args...)
	out, err := exec.Command(digPath, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "status: ") {
			status = strings.TrimSuffix(strings.Fields(strings.SplitN(line, "status: ", 2)[1])[0], ",")
		}
	}
	short, _ := exec.Command(digPath, append(full, "+short")...).CombinedOutput()
	return strings.TrimSpace(string(short)), status
}

// TestDNSFromStore: the DNS server answers from the same store as DHCP and
// the API, so a change is visible to the very next query (checked with dig).
func TestDNSFromStore(t *testing.T) {
	netnstest.Tool(t, "dig")
	ta := startAgent(t, func(c *Config) { c.DNS.Listen = "127.0.0.1:0" })
	select {
	case <-ta.dns.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("dns did not start")
	}
	ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.40.0.0/24", Domain: "rack.example",
		DynamicRanges: []api.Range{{Start: "10.40.0.100", End: "10.40.0.200"}}}, nil)
	ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "fd00:40::/64", Domain: "v6.rack.example"}, nil)
	ta.addMachine(t, api.CreateMachine{Hostname: "web1", MACs: []string{"52:54:00:40:00:01"}})
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:40:00:01", IP: "10.40.0.10"}, nil); status != 201 {
		t.Fatalf("assign: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:40:00:01", IP: "fd00:40::10", Alias: true}, nil); status != 201 {
		t.Fatalf("assign v6: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/ips/reservations", api.ReserveRequest{IP: "10.40.0.5", Hostname: "switch1"}, nil); status != 201 {
		t.Fatalf("reserve: %d %s", status, raw)
	}
	tests := map[string]struct {
		args         []string
		answer, code string
	}{
		"machine A":         {[]string{"web1.rack.example", "A"}, "10.40.0.10", "NOERROR"},
		"machine AAAA":      {[]string{"web1.v6.rack.example", "AAAA"}, "fd00:40::10", "NOERROR"},
		"reservation A":     {[]string{"SWITCH1.rack.example", "A"}, "10.40.0.5", "NOERROR"},
		"reverse machine":   {[]string{"-x", "10.40.0.10"}, "web1.rack.example.", "NOERROR"},
		"reverse v6":        {[]string{"-x", "fd00:40::10"}, "web1.v6.rack.example.", "NOERROR"},
		"reverse reserved":  {[]string{"-x", "10.40.0.5"}, "switch1.rack.example.", "NOERROR"},
		"unknown in zone":   {[]string{"nosuch.rack.example", "A"}, "", "NXDOMAIN"},
		"unknown reverse":   {[]string{"-x", "10.40.0.99"}, "", "NXDOMAIN"},
		"outside the zones": {[]string{"example.com", "A"}, "", "REFUSED"},
		"over tcp":          {[]string{"+tcp", "web1.rack.example", "A"}, "10.40.0.10", "NOERROR"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			answer, status := dig(t, ta, tc.args...)
			if answer != tc.answer || status != tc.code {
				t.Fatalf("dig %v = %q %s; want %q %s", tc.args, answer, status, tc.answer, tc.code)
			}
		})
	}
	// An override is visible at once.
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:40:00:01", IP: "10.40.0.11"}, nil); status != 201 {
		t.Fatalf("override: %d %s", status, raw)
	}
	if answer, _ := dig(t, ta, "web1.rack.example", "A"); answer != "10.40.0.11" {
		t.Fatalf("after the override dig says %q", answer)
	}
}
