package dns

import (
	"context"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"rackd/internal/netnstest"
)

// These tests put a real peer, ISC dig (Debian bind9-dnsutils), against the
// server on loopback. dig checks the replies with its own parser, sends
// EDNS0 with a cookie by default, and falls back to TCP on TC as resolvers
// do.

// digReply is what a test reads of dig's output.
type digReply struct {
	status    string
	flags     []string
	answer    []string // records with fields joined by one space
	authority []string
	transport string // "UDP" or "TCP", from the SERVER line
	raw       string
}

func (r digReply) flag(f string) bool { return slices.Contains(r.flags, f) }

var (
	digStatus = regexp.MustCompile(`->>HEADER<<- opcode: \w+, status: (\w+),`)
	digFlags  = regexp.MustCompile(`(?m)^;; flags:([a-z ]*);`)
	digServer = regexp.MustCompile(`(?m)^;; SERVER: .*\((UDP|TCP)\)`)
)

// dig asks the server at addr, once, with a short timeout, and parses the
// reply.
func dig(t *testing.T, path string, addr netip.AddrPort, args ...string) digReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	argv := append([]string{"@" + addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port())), "+tries=1", "+time=3"}, args...)
	out, err := exec.CommandContext(ctx, path, argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	r := digReply{raw: string(out)}
	if m := digStatus.FindStringSubmatch(r.raw); m != nil {
		r.status = m[1]
	} else {
		t.Fatalf("dig %s: no status in\n%s", strings.Join(argv, " "), out)
	}
	if m := digFlags.FindStringSubmatch(r.raw); m != nil {
		r.flags = strings.Fields(m[1])
	}
	if m := digServer.FindStringSubmatch(r.raw); m != nil {
		r.transport = m[1]
	}
	var section *[]string
	for _, line := range strings.Split(r.raw, "\n") {
		switch {
		case strings.HasPrefix(line, ";; ANSWER SECTION:"):
			section = &r.answer
		case strings.HasPrefix(line, ";; AUTHORITY SECTION:"):
			section = &r.authority
		case strings.HasPrefix(line, ";"), strings.TrimSpace(line) == "":
			section = nil
		case section != nil:
			*section = append(*section, strings.Join(strings.Fields(line), " "))
		}
	}
	return r
}

func TestDig(t *testing.T) {
	path := netnstest.Tool(t, "dig")
	z := newFakeZone()
	s, _ := startServer(t, Config{}, z)
	addr := s.Addr()

	tests := map[string]struct {
		args      []string
		status    string
		aa        bool
		tc        bool
		answer    []string
		authority []string
		transport string
	}{
		"forward A": {
			args: []string{"node1.rack.example", "A"}, status: "NOERROR", aa: true,
			answer: []string{"node1.rack.example. 30 IN A 10.0.0.11"}, transport: "UDP",
		},
		"forward AAAA": {
			args: []string{"node1.rack.example", "AAAA"}, status: "NOERROR", aa: true,
			answer: []string{"node1.rack.example. 30 IN AAAA 2001:db8::11"},
		},
		"mixed case keeps its case": {
			args: []string{"NODE1.Rack.Example", "A"}, status: "NOERROR", aa: true,
			answer: []string{"NODE1.Rack.Example. 30 IN A 10.0.0.11"},
		},
		"reverse v4": {
			args: []string{"-x", "10.0.0.11"}, status: "NOERROR", aa: true,
			answer: []string{"11.0.0.10.in-addr.arpa. 30 IN PTR node1.rack.example."},
		},
		"reverse v6": {
			args: []string{"-x", "2001:db8::11"}, status: "NOERROR", aa: true,
			answer: []string{"1.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa. 30 IN PTR node1.rack.example."},
		},
		"reverse of an unknown address": {
			args: []string{"-x", "10.0.0.99"}, status: "NXDOMAIN", aa: true,
			authority: []string{"0.10.in-addr.arpa. 30 IN SOA ns.0.10.in-addr.arpa. hostmaster.0.10.in-addr.arpa. 1700000000 3600 900 1209600 30"},
		},
		"unknown name in the zone": {
			args: []string{"nope.rack.example", "A"}, status: "NXDOMAIN", aa: true,
			authority: []string{"rack.example. 30 IN SOA ns.rack.example. hostmaster.rack.example. 1700000000 3600 900 1209600 30"},
		},
		"name without the type": {
			args: []string{"v4only.rack.example", "AAAA"}, status: "NOERROR", aa: true,
			authority: []string{"rack.example. 30 IN SOA ns.rack.example. hostmaster.rack.example. 1700000000 3600 900 1209600 30"},
		},
		"name outside": {
			args: []string{"www.example.com", "A"}, status: "REFUSED",
		},
		"over TCP": {
			args: []string{"+tcp", "node1.rack.example", "A"}, status: "NOERROR", aa: true,
			answer: []string{"node1.rack.example. 30 IN A 10.0.0.11"}, transport: "TCP",
		},
		"reverse over TCP": {
			args: []string{"+tcp", "-x", "10.0.0.11"}, status: "NOERROR", aa: true,
			answer: []string{"11.0.0.10.in-addr.arpa. 30 IN PTR node1.rack.example."}, transport: "TCP",
		},
		"SOA at the apex": {
			args: []string{"rack.example", "SOA"}, status: "NOERROR", aa: true,
			answer: []string{"rack.example. 30 IN SOA ns.rack.example. hostmaster.rack.example. 1700000000 3600 900 1209600 30"},
		},
		"without EDNS": {
			args: []string{"+noedns", "node1.rack.example", "A"}, status: "NOERROR", aa: true,
			answer: []string{"node1.rack.example. 30 IN A 10.0.0.11"},
		},
		"truncated over UDP": {
			args: []string{"+ignore", "+bufsize=512", "many.rack.example", "AAAA"}, status: "NOERROR", aa: true, tc: true,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := dig(t, path, addr, tt.args...)
			if r.status != tt.status {
				t.Errorf("status %s, want %s", r.status, tt.status)
			}
			if r.flag("aa") != tt.aa || r.flag("tc") != tt.tc || r.flag("ra") || !r.flag("qr") {
				t.Errorf("flags %v, want qr, aa=%v tc=%v, never ra", r.flags, tt.aa, tt.tc)
			}
			if tt.answer != nil && !slices.Equal(r.answer, tt.answer) {
				t.Errorf("answer %q, want %q", r.answer, tt.answer)
			}
			if !slices.Equal(r.authority, tt.authority) {
				t.Errorf("authority %q, want %q", r.authority, tt.authority)
			}
			if tt.transport != "" && r.transport != tt.transport {
				t.Errorf("transport %q, want %q", r.transport, tt.transport)
			}
			if t.Failed() {
				t.Logf("dig output:\n%s", r.raw)
			}
		})
	}
}

// dig retries a truncated answer over TCP and gets all of it.
func TestDigFallsBackToTCP(t *testing.T) {
	path := netnstest.Tool(t, "dig")
	s, _ := startServer(t, Config{}, newFakeZone())
	r := dig(t, path, s.Addr(), "+bufsize=512", "many.rack.example", "AAAA")
	if r.status != "NOERROR" || r.flag("tc") || len(r.answer) != 100 || r.transport != "TCP" {
		t.Errorf("status %s flags %v %d answers over %s, want all 100 over TCP\n%s", r.status, r.flags, len(r.answer), r.transport, r.raw)
	}
}

// A change in the zone is in the very next dig.
func TestDigSeesChanges(t *testing.T) {
	path := netnstest.Tool(t, "dig")
	z := newFakeZone()
	s, _ := startServer(t, Config{}, z)
	addr := s.Addr()

	if r := dig(t, path, addr, "new.rack.example", "A"); r.status != "NXDOMAIN" {
		t.Fatalf("before: status %s, want NXDOMAIN\n%s", r.status, r.raw)
	}
	z.set("new.rack.example.", "10.0.0.50")
	z.setPTR("10.0.0.50", "new.rack.example.")
	if r := dig(t, path, addr, "new.rack.example", "A"); !slices.Equal(r.answer, []string{"new.rack.example. 30 IN A 10.0.0.50"}) {
		t.Fatalf("after adding: %q\n%s", r.answer, r.raw)
	}
	if r := dig(t, path, addr, "-x", "10.0.0.50"); !slices.Equal(r.answer, []string{"50.0.0.10.in-addr.arpa. 30 IN PTR new.rack.example."}) {
		t.Fatalf("reverse after adding: %q\n%s", r.answer, r.raw)
	}
	z.set("new.rack.example.", "10.0.0.51")
	if r := dig(t, path, addr, "+tcp", "new.rack.example", "A"); !slices.Equal(r.answer, []string{"new.rack.example. 30 IN A 10.0.0.51"}) {
		t.Fatalf("after moving: %q\n%s", r.answer, r.raw)
	}
	z.set("new.rack.example.")
	if r := dig(t, path, addr, "new.rack.example", "A"); r.status != "NXDOMAIN" {
		t.Fatalf("after removing: status %s, want NXDOMAIN\n%s", r.status, r.raw)
	}
}
