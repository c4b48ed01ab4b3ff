package store_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

var (
	// small leaves its static addresses from .9 up: gateway .1, dynamic
	// .2-.5, reserved .6-.8.
	small = store.Subnet{CIDR: pfx("10.0.5.0/28"), Gateway: addr("10.0.5.1"),
		DynamicRanges:  []store.Range{rng("10.0.5.2", "10.0.5.5")},
		ReservedRanges: []store.Range{rng("10.0.5.6", "10.0.5.8")}}
	// full has no static address left: its dynamic range is all of it.
	full = store.Subnet{CIDR: pfx("10.0.6.0/29"), DynamicRanges: []store.Range{rng("10.0.6.1", "10.0.6.6")}}
)

// webRack is lab and lab2 with web1 (two interfaces, the first with the
// sticky address 10.0.0.10) and web2 (no address).
func webRack(t *testing.T, subnets []store.Subnet, opts ...func(*store.Options)) (*store.Store, *fakeClock) {
	t.Helper()
	s, clk := newIPAM(t, subnets, opts...)
	machineWith(t, s, "web1", macWeb1, macWeb1b)
	machineWith(t, s, "web2", macWeb2)
	return s, clk
}

func withSticky(t *testing.T, s *store.Store, _ *fakeClock) {
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
}

// ipsOf lists a machine's live addresses, sorted.
func ipsOf(t *testing.T, s *store.Store, machine string) []string {
	t.Helper()
	m, err := s.Machine(machine)
	if err != nil {
		t.Fatal(err)
	}
	as, err := s.MachineAddresses(m)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IP.String())
	}
	slices.Sort(out)
	return out
}

func lastEvent(t *testing.T, s *store.Store, machine string) store.Event {
	t.Helper()
	ev, err := s.Events(machine, 1)
	if err != nil || len(ev) != 1 {
		t.Fatalf("Events(%s) = %v, %v", machine, ev, err)
	}
	return ev[0]
}

func TestReserve(t *testing.T) {
	tests := map[string]struct {
		setup ipamSetup
		actor store.Actor // alice unless set
		req   store.ReserveRequest
		code  store.Code
		want  string
		check func(t *testing.T, s *store.Store, a store.Address)
	}{
		"by IP": {req: store.ReserveRequest{IP: addr("10.0.0.30"), MAC: "52-54-00-5E-00-01", Hostname: "sw1", Purpose: "switch management"},
			want: "10.0.0.30", check: func(t *testing.T, s *store.Store, a store.Address) {
				want := store.Address{IP: addr("10.0.0.30"), Subnet: labNet, Kind: store.KindReserved, MAC: macSw,
					Hostname: "sw1", Owner: "alice", Purpose: "switch management", Created: t0}
				if a != want {
					t.Errorf("got %+v, want %+v", a, want)
				}
				if got := addressMap(t, s)[a.IP]; got != want {
					t.Errorf("stored %+v", got)
				}
			}},
		"by IPv4-mapped IP":           {req: store.ReserveRequest{IP: addr("::ffff:10.0.0.30")}, want: "10.0.0.30"},
		"by IP in the reserved range": {req: store.ReserveRequest{IP: addr("10.0.0.205")}, want: "10.0.0.205"},
		"by IP in the dynamic range":  {req: store.ReserveRequest{IP: addr("10.0.0.150")}, want: "10.0.0.150"},
		"by IP and its subnet":        {req: store.ReserveRequest{IP: addr("10.0.1.30"), Subnet: lab2Net}, want: "10.0.1.30"},
		"by an admin": {actor: storetest.Admin, req: store.ReserveRequest{IP: addr("10.0.0.30")}, want: "10.0.0.30",
			check: func(t *testing.T, _ *store.Store, a store.Address) {
				if a.Owner != "admin" {
					t.Errorf("owner %q", a.Owner)
				}
			}},
		"by subnet":          {req: store.ReserveRequest{Subnet: labNet}, want: "10.0.0.3"}, // .1 gateway, .2 DNS
		"by unmasked subnet": {req: store.ReserveRequest{Subnet: pfx("10.0.0.77/24")}, want: "10.0.0.3"},
		"by subnet, skipping": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, bob, store.ReserveRequest{IP: addr("10.0.0.3")})
			mustQuarantine(t, s, "10.0.0.4")
			mustAssign(t, s, store.AssignRequest{Machine: "web2", MAC: macWeb2, IP: addr("10.0.0.5")})
		}, req: store.ReserveRequest{Subnet: labNet}, want: "10.0.0.6"},
		"by subnet, expired quarantine": {setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
			mustQuarantine(t, s, "10.0.0.3")
			clk.Advance(time.Hour)
		}, req: store.ReserveRequest{Subnet: labNet}, want: "10.0.0.3"},
		"by subnet, outside the dynamic and reserved ranges": {req: store.ReserveRequest{Subnet: small.CIDR}, want: "10.0.5.9"},
		"by subnet, nothing left":                            {req: store.ReserveRequest{Subnet: full.CIDR}, code: store.CodeExhausted},
		"a machine's sticky address":                         {setup: withSticky, req: store.ReserveRequest{IP: addr("10.0.0.10")}, code: store.CodeIPInUse},
		"another reservation": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, bob, store.ReserveRequest{IP: addr("10.0.0.30")})
		}, req: store.ReserveRequest{IP: addr("10.0.0.30")}, code: store.CodeIPInUse},
		"another MAC's live lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macA, link, "10.0.0.150")
		}, req: store.ReserveRequest{IP: addr("10.0.0.150"), MAC: macSw}, code: store.CodeIPInUse},
		"a live lease, no MAC": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macA, link, "10.0.0.150")
		}, req: store.ReserveRequest{IP: addr("10.0.0.150")}, code: store.CodeIPInUse},
		"another MAC's expired lease": {setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
			lease(t, s, macA, link, "10.0.0.150")
			clk.Advance(time.Hour)
		}, req: store.ReserveRequest{IP: addr("10.0.0.150"), MAC: macSw}, want: "10.0.0.150", check: func(t *testing.T, s *store.Store, _ store.Address) {
			if g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP == addr("10.0.0.150") {
				t.Error("the old client is offered the reserved address")
			}
		}},
		"quarantined": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { mustQuarantine(t, s, "10.0.0.30") },
			req: store.ReserveRequest{IP: addr("10.0.0.30")}, code: store.CodeIPInUse},
		"offered to another MAC": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
		}, req: store.ReserveRequest{IP: addr("10.0.0.100"), MAC: macSw}, code: store.CodeIPInUse},
		"offered, reserved without a MAC": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
		}, req: store.ReserveRequest{IP: addr("10.0.0.100")}, code: store.CodeIPInUse},
		"offered to the same MAC": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustOffer(t, s, store.LeaseRequest{MAC: macSw, Link: link})
		}, req: store.ReserveRequest{IP: addr("10.0.0.100"), MAC: macSw}, want: "10.0.0.100"},
		"the device's own live lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macSw, link, "10.0.0.150")
		}, req: store.ReserveRequest{IP: addr("10.0.0.150"), MAC: macSw, Hostname: "sw1"}, want: "10.0.0.150",
			check: func(t *testing.T, s *store.Store, _ store.Address) {
				if ls := leaseMap(t, s); len(ls) != 0 {
					t.Errorf("the lease is still listed: %v", ls)
				}
				g := mustOffer(t, s, store.LeaseRequest{MAC: macSw, Link: link})
				if g.Address.Kind != store.KindReserved || g.Address.IP != addr("10.0.0.150") || g.Name != "sw1" {
					t.Errorf("the device is offered %+v", g)
				}
			}},
		"MAC of a machine": {req: store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macWeb1b}, code: store.CodeConflict},
		"second reservation of a MAC in the subnet": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw})
		}, req: store.ReserveRequest{IP: addr("10.0.0.31"), MAC: macSw}, code: store.CodeConflict},
		"same MAC in another subnet": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw})
		}, req: store.ReserveRequest{IP: addr("10.0.1.30"), MAC: macSw}, want: "10.0.1.30"},
		"hostname of a machine": {req: store.ReserveRequest{IP: addr("10.0.0.30"), Hostname: "web1"}, code: store.CodeConflict},
		"hostname of a reservation": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, bob, store.ReserveRequest{IP: addr("10.0.0.30"), Hostname: "sw1"})
		}, req: store.ReserveRequest{IP: addr("10.0.0.31"), Hostname: "SW1."}, code: store.CodeConflict},
		"hostname normalised": {req: store.ReserveRequest{IP: addr("10.0.0.30"), Hostname: " SW2. "}, want: "10.0.0.30",
			check: func(t *testing.T, _ *store.Store, a store.Address) {
				if a.Hostname != "sw2" {
					t.Errorf("hostname %q", a.Hostname)
				}
			}},
		"invalid hostname":            {req: store.ReserveRequest{IP: addr("10.0.0.30"), Hostname: "sw_1"}, code: store.CodeInvalid},
		"bad MAC":                     {req: store.ReserveRequest{IP: addr("10.0.0.30"), MAC: "zz"}, code: store.CodeInvalid},
		"purpose too long":            {req: store.ReserveRequest{IP: addr("10.0.0.30"), Purpose: strings.Repeat("x", 257)}, code: store.CodeInvalid},
		"neither IP nor subnet":       {req: store.ReserveRequest{Hostname: "sw1"}, code: store.CodeInvalid},
		"unmanaged IP":                {req: store.ReserveRequest{IP: addr("192.168.1.5")}, code: store.CodeInvalid},
		"IP outside the given subnet": {req: store.ReserveRequest{IP: addr("10.0.0.30"), Subnet: lab2Net}, code: store.CodeInvalid},
		"unmanaged subnet":            {req: store.ReserveRequest{Subnet: pfx("10.9.0.0/24")}, code: store.CodeNotFound},
		"network address":             {req: store.ReserveRequest{IP: addr("10.0.0.0")}, code: store.CodeInvalid},
		"broadcast address":           {req: store.ReserveRequest{IP: addr("10.0.0.255")}, code: store.CodeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := webRack(t, []store.Subnet{lab(), lab2(), small, full})
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			actor := tc.actor
			if actor.Name == "" {
				actor = alice
			}
			before := addressMap(t, s)
			a, err := s.Reserve(bg, actor, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.IP != addr(tc.want) || a.Kind != store.KindReserved || !a.Subnet.Contains(a.IP) || a.Owner != actor.Name {
				t.Errorf("reserved %+v, want %s", a, tc.want)
			}
			if got, ok := addressMap(t, s)[a.IP]; !ok || got.Kind != store.KindReserved {
				t.Errorf("not listed: %+v", got)
			}
			if tc.check != nil {
				tc.check(t, s, a)
			}
		})
	}
}

func TestUnreserve(t *testing.T) {
	tests := map[string]struct {
		actor store.Actor
		ip    string
		code  store.Code
	}{
		"by its owner":          {actor: alice, ip: "10.0.0.30"},
		"IPv4-mapped":           {actor: alice, ip: "::ffff:10.0.0.30"},
		"by an admin":           {actor: storetest.Admin, ip: "10.0.0.30"},
		"by another user":       {actor: bob, ip: "10.0.0.30", code: store.CodeForbidden},
		"not reserved":          {actor: storetest.Admin, ip: "10.0.0.31", code: store.CodeNotFound},
		"a lease":               {actor: storetest.Admin, ip: "10.0.0.150", code: store.CodeNotFound},
		"a machine's address":   {actor: storetest.Admin, ip: "10.0.0.10", code: store.CodeNotFound},
		"an unmanaged address":  {actor: storetest.Admin, ip: "192.168.0.1", code: store.CodeNotFound},
		"a quarantined address": {actor: storetest.Admin, ip: "10.0.0.40", code: store.CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := webRack(t, []store.Subnet{lab()})
			withSticky(t, s, nil)
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw, Hostname: "sw1"})
			lease(t, s, macA, link, "10.0.0.150")
			mustQuarantine(t, s, "10.0.0.40")
			before := addressMap(t, s)
			a, err := s.Unreserve(bg, tc.actor, addr(tc.ip))
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.IP != addr("10.0.0.30") || a.Kind != store.KindReserved || a.Owner != "alice" {
				t.Errorf("unreserved %+v", a)
			}
			if _, ok := addressMap(t, s)[a.IP]; ok {
				t.Error("still listed")
			}
			// The device is a stranger now, and the name is gone.
			if g := mustOffer(t, s, store.LeaseRequest{MAC: macSw, Link: link}); g.Address.Kind != store.KindDynamic || g.Name != "" {
				t.Errorf("the device is offered %+v", g)
			}
			if ips, _ := s.DNSForward("sw1.rack.example."); len(ips) != 0 {
				t.Errorf("sw1 still resolves to %v", ips)
			}
			mustReserve(t, s, bob, store.ReserveRequest{IP: a.IP, Hostname: "sw1"})
		})
	}
}

func TestAssignMachineIP(t *testing.T) {
	both := []store.Subnet{lab(), lab2()}
	tests := map[string]struct {
		subnets []store.Subnet // lab and lab2 unless set
		setup   ipamSetup
		actor   store.Actor // admin unless set
		req     store.AssignRequest
		code    store.Code
		want    string
	}{
		"explicit IP":                         {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, want: "10.0.0.10"},
		"explicit IP, second subnet":          {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.1.10")}, want: "10.0.1.10"},
		"explicit IP, reserved range":         {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.205")}, want: "10.0.0.205"},
		"explicit IP, mapped":                 {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("::ffff:10.0.0.10")}, want: "10.0.0.10"},
		"hostname in capitals, MAC in dashes": {req: store.AssignRequest{Machine: "WEB1", MAC: "52-54-00-00-01-01", IP: addr("10.0.0.10")}, want: "10.0.0.10"},
		"subnet given":                        {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: lab2Net}, want: "10.0.1.2"},
		"subnet of the interface's lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macWeb1, link2, "")
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, want: "10.0.1.2"},
		"subnet of the interface's expired lease": {setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
			lease(t, s, macWeb1, link2, "")
			clk.Advance(3 * time.Hour)
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, want: "10.0.1.2"},
		"another interface's lease does not tell": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macWeb1b, link2, "")
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, code: store.CodeInvalid},
		"the only subnet":        {subnets: []store.Subnet{lab()}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, want: "10.0.0.3"},
		"two subnets, no lease":  {req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, code: store.CodeInvalid},
		"no subnet":              {subnets: []store.Subnet{}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, code: store.CodeNoSubnet},
		"unmanaged subnet":       {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: pfx("10.9.0.0/24")}, code: store.CodeNotFound},
		"no static address left": {subnets: []store.Subnet{full}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1}, code: store.CodeExhausted},
		"a reserved address": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30")})
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.30")}, code: store.CodeIPInUse},
		"another machine's address": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustAssign(t, s, store.AssignRequest{Machine: "web2", MAC: macWeb2, IP: addr("10.0.0.10")})
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, code: store.CodeIPInUse},
		"its other interface's address": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1b, IP: addr("10.0.0.10")})
		}, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, code: store.CodeIPInUse},
		"quarantined": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { mustQuarantine(t, s, "10.0.0.30") },
			req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.30")}, code: store.CodeIPInUse},
		"a free dynamic address": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.150")}, code: store.CodeInvalid},
		"its own lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macWeb1, link, "10.0.0.150") },
			req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.150")}, code: store.CodeInvalid},
		"another's lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macA, link, "10.0.0.150") },
			req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.150")}, code: store.CodeIPInUse},
		"the network address":   {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.0")}, code: store.CodeInvalid},
		"the gateway":           {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.1")}, code: store.CodeInvalid},
		"the DNS server":        {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.2")}, code: store.CodeInvalid},
		"the broadcast address": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.255")}, code: store.CodeInvalid},
		"unmanaged address":     {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("192.168.0.5")}, code: store.CodeInvalid},
		"another machine's MAC": {req: store.AssignRequest{Machine: "web1", MAC: macWeb2, IP: addr("10.0.0.10")}, code: store.CodeInvalid},
		"a stranger's MAC":      {req: store.AssignRequest{Machine: "web1", MAC: macA, IP: addr("10.0.0.10")}, code: store.CodeInvalid},
		"bad MAC":               {req: store.AssignRequest{Machine: "web1", MAC: "x", IP: addr("10.0.0.10")}, code: store.CodeInvalid},
		"unknown machine":       {req: store.AssignRequest{Machine: "web9", MAC: macWeb1, IP: addr("10.0.0.10")}, code: store.CodeNotFound},
		"by its owner": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { allocate(t, s, alice, "web1", "juju") },
			actor: alice, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, want: "10.0.0.10"},
		"by another user": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { allocate(t, s, alice, "web1", "juju") },
			actor: bob, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, code: store.CodeForbidden},
		"by a user, unallocated": {actor: alice, req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")}, code: store.CodeForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			subnets := tc.subnets
			if subnets == nil {
				subnets = both
			}
			s, clk := webRack(t, subnets)
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			actor := tc.actor
			if actor.Name == "" {
				actor = storetest.Admin
			}
			before, history := addressMap(t, s), snap(t, s)
			a, err := s.AssignMachineIP(bg, actor, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				history.mustEqual(t, snap(t, s))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			web1, _ := s.Machine("web1")
			if a.IP != addr(tc.want) || a.Kind != store.KindSticky || a.MachineID != web1.ID || a.MAC != macWeb1 || !a.Subnet.Contains(a.IP) {
				t.Errorf("assigned %+v, want %s", a, tc.want)
			}
			if got := addressMap(t, s)[a.IP]; got != a {
				t.Errorf("stored %+v, returned %+v", got, a)
			}
			if !slices.Contains(ipsOf(t, s, "web1"), tc.want) {
				t.Errorf("MachineAddresses(web1) = %v, want %s among them", ipsOf(t, s, "web1"), tc.want)
			}
			e := lastEvent(t, s, "web1")
			if e.Action != "ip-assign" || e.Actor != actor.Name || !strings.Contains(e.Reason, tc.want+" on "+macWeb1) {
				t.Errorf("event %+v", e)
			}
			// The interface's lease in that subnet, if any, is over, on
			// whatever address it was: it has its own address now.
			for ip, m := range leaseMap(t, s) {
				if m == macWeb1 && a.Subnet.Contains(ip) {
					t.Errorf("the lease on %s is still listed beside the sticky address %s", ip, a.IP)
				}
			}
		})
	}
}

// TestAssignAgain: assigning the address an interface already has changes
// nothing, not even the history.
func TestAssignAgain(t *testing.T) {
	s, _ := webRack(t, []store.Subnet{lab()})
	first := mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	history := snap(t, s)
	again := mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	if again != first {
		t.Errorf("again %+v, first %+v", again, first)
	}
	history.mustEqual(t, snap(t, s))
}

// TestAssignOverride: a new address replaces the interface's sticky address
// in that subnet, which returns to the pool, and the history says so; an
// alias keeps both.
func TestAssignOverride(t *testing.T) {
	tests := map[string]struct {
		req       store.AssignRequest
		want      []string
		action    string
		says, not string
		freed     bool
	}{
		"override": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.11")},
			want: []string{"10.0.0.11", "10.0.1.10"}, action: "ip-assign",
			says: "10.0.0.11 on 52:54:00:00:01:01: 10.0.0.11 replaces 10.0.0.10, which returns to the pool", freed: true},
		"override with a reason": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.11"), Reason: "renumbered"},
			want: []string{"10.0.0.11", "10.0.1.10"}, action: "ip-assign", says: "returns to the pool; renumbered", freed: true},
		"override without an address": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: labNet},
			want: []string{"10.0.0.3", "10.0.1.10"}, action: "ip-assign", says: "10.0.0.3 replaces 10.0.0.10", freed: true},
		"alias": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.11"), Alias: true},
			want: []string{"10.0.0.10", "10.0.0.11", "10.0.1.10"}, action: "ip-alias", says: "10.0.0.11 on 52:54:00:00:01:01", not: "replaces"},
		"the other interface": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1b, IP: addr("10.0.0.11")},
			want: []string{"10.0.0.10", "10.0.0.11", "10.0.1.10"}, action: "ip-assign", says: "10.0.0.11 on 52:54:00:00:01:02", not: "replaces"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := webRack(t, []store.Subnet{lab(), lab2()})
			withSticky(t, s, nil)
			mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.1.10")})
			mustAssign(t, s, tc.req)
			if got := ipsOf(t, s, "web1"); !slices.Equal(got, tc.want) {
				t.Errorf("web1 has %v, want %v", got, tc.want)
			}
			e := lastEvent(t, s, "web1")
			if e.Action != tc.action || !strings.Contains(e.Reason, tc.says) || (tc.not != "" && strings.Contains(e.Reason, tc.not)) {
				t.Errorf("event %+v: want %s saying %q (and not %q)", e, tc.action, tc.says, tc.not)
			}
			_, err := s.Reserve(bg, alice, store.ReserveRequest{IP: addr("10.0.0.10")})
			if tc.freed && err != nil {
				t.Errorf("the replaced address is not free: %v", err)
			} else if !tc.freed {
				wantCode(t, err, store.CodeIPInUse)
			}
			// DHCP answers the first interface with its (first) sticky address.
			g := mustOffer(t, s, store.LeaseRequest{MAC: macWeb1, Link: link})
			if g.Address.Kind != store.KindSticky || !slices.Contains(tc.want, g.Address.IP.String()) || (tc.freed && g.Address.IP == addr("10.0.0.10")) {
				t.Errorf("DHCP offers web1 %+v", g.Address)
			}
		})
	}
}

func TestRemoveMachineIP(t *testing.T) {
	tests := map[string]struct {
		setup   ipamSetup
		actor   store.Actor
		machine string
		ip      string
		code    store.Code
	}{
		"by an admin": {actor: storetest.Admin, machine: "web1", ip: "10.0.0.10"},
		"IPv4-mapped": {actor: storetest.Admin, machine: "web1", ip: "::ffff:10.0.0.10"},
		"by its owner": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { allocate(t, s, alice, "web1", "juju") },
			actor: alice, machine: "web1", ip: "10.0.0.10"},
		"by another user": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { allocate(t, s, alice, "web1", "juju") },
			actor: bob, machine: "web1", ip: "10.0.0.10", code: store.CodeForbidden},
		"not its address":           {actor: storetest.Admin, machine: "web1", ip: "10.0.0.11", code: store.CodeNotFound},
		"another machine's address": {actor: storetest.Admin, machine: "web1", ip: "10.0.0.20", code: store.CodeNotFound},
		"its lease": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macWeb1b, link, "10.0.0.150") },
			actor: storetest.Admin, machine: "web1", ip: "10.0.0.150", code: store.CodeNotFound},
		"a reservation": {setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30")})
		}, actor: storetest.Admin, machine: "web1", ip: "10.0.0.30", code: store.CodeNotFound},
		"unknown machine": {actor: storetest.Admin, machine: "web9", ip: "10.0.0.10", code: store.CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := webRack(t, []store.Subnet{lab()})
			withSticky(t, s, nil)
			mustAssign(t, s, store.AssignRequest{Machine: "web2", MAC: macWeb2, IP: addr("10.0.0.20")})
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			before, history := addressMap(t, s), snap(t, s)
			a, err := s.RemoveMachineIP(bg, tc.actor, tc.machine, addr(tc.ip))
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				history.mustEqual(t, snap(t, s))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.IP != addr("10.0.0.10") || a.Kind != store.KindSticky || a.MAC != macWeb1 {
				t.Errorf("removed %+v", a)
			}
			if got := ipsOf(t, s, "web1"); len(got) != 0 {
				t.Errorf("web1 still has %v", got)
			}
			e := lastEvent(t, s, "web1")
			if e.Action != "ip-remove" || e.Actor != tc.actor.Name || e.Reason != "10.0.0.10 on 52:54:00:00:01:01 returns to the pool" {
				t.Errorf("event %+v", e)
			}
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.10")})
			if need, err := s.NeedsSticky(mustMachine(t, s, "web1")); err != nil || !need {
				t.Errorf("NeedsSticky after removal = %v, %v", need, err)
			}
		})
	}
}

func mustMachine(t *testing.T, s *store.Store, name string) store.Machine {
	t.Helper()
	m, err := s.Machine(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestStickyCandidate: the candidate is what AssignMachineIP without an
// address then takes.
func TestStickyCandidate(t *testing.T) {
	tests := map[string]struct {
		subnets []store.Subnet
		setup   ipamSetup
		machine string
		subnet  netip.Prefix
		code    store.Code
		want    string
	}{
		"the only subnet": {subnets: []store.Subnet{lab()}, want: "10.0.0.3"},
		"skipping what is held": {subnets: []store.Subnet{lab()}, setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.3")})
			mustQuarantine(t, s, "10.0.0.4")
			mustAssign(t, s, store.AssignRequest{Machine: "web2", MAC: macWeb2, IP: addr("10.0.0.5")})
		}, want: "10.0.0.6"},
		"outside the ranges": {subnets: []store.Subnet{small}, want: "10.0.5.9"},
		"subnet given":       {subnets: []store.Subnet{lab(), lab2()}, subnet: lab2Net, want: "10.0.1.2"},
		"subnet of the lease": {subnets: []store.Subnet{lab(), lab2()}, setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macWeb1, link2, "")
		}, want: "10.0.1.2"},
		"by machine hostname in capitals": {subnets: []store.Subnet{lab()}, machine: "WEB1", want: "10.0.0.3"},
		"two subnets, no lease":           {subnets: []store.Subnet{lab(), lab2()}, code: store.CodeInvalid},
		"no subnet":                       {subnets: []store.Subnet{}, code: store.CodeNoSubnet},
		"nothing left":                    {subnets: []store.Subnet{full}, code: store.CodeExhausted},
		"unknown machine":                 {subnets: []store.Subnet{lab()}, machine: "web9", code: store.CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := webRack(t, tc.subnets)
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			machine := tc.machine
			if machine == "" {
				machine = "web1"
			}
			before := addressMap(t, s)
			ip, err := s.StickyCandidate(machine, macWeb1, tc.subnet)
			unchanged(t, s, before)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				return
			}
			if err != nil || ip != addr(tc.want) {
				t.Fatalf("StickyCandidate = %s, %v; want %s", ip, err, tc.want)
			}
			if again, _ := s.StickyCandidate(machine, macWeb1, tc.subnet); again != ip {
				t.Errorf("asked again: %s, then %s", ip, again)
			}
			a := mustAssign(t, s, store.AssignRequest{Machine: machine, MAC: macWeb1, Subnet: tc.subnet})
			if a.IP != ip {
				t.Errorf("StickyCandidate said %s, AssignMachineIP took %s", ip, a.IP)
			}
		})
	}
}

func TestNeedsSticky(t *testing.T) {
	off := false
	tests := map[string]struct {
		opts    func(*store.Options)
		state   store.State
		prepare func(t *testing.T, s *store.Store, m store.Machine) store.Machine
		want    bool
	}{
		"commissioned, no address": {state: store.StateReady, want: true},
		"not commissioned":         {state: store.StateNew, want: false},
		"commissioning done": {state: store.StateNew, want: true,
			prepare: func(t *testing.T, s *store.Store, m store.Machine) store.Machine {
				transition(t, s, storetest.Admin, m.ID, store.ActionCommission)
				return transition(t, s, storetest.Admin, m.ID, store.ActionCommissioningDone)
			}},
		"has its sticky address": {state: store.StateReady, want: false,
			prepare: func(t *testing.T, s *store.Store, m store.Machine) store.Machine {
				mustAssign(t, s, store.AssignRequest{Machine: m.ID, MAC: macWeb1, IP: addr("10.0.0.10")})
				return m
			}},
		"sticky address in another subnet only": {state: store.StateReady, want: false,
			prepare: func(t *testing.T, s *store.Store, m store.Machine) store.Machine {
				mustAssign(t, s, store.AssignRequest{Machine: m.ID, MAC: macWeb1, IP: addr("10.0.1.10")})
				return m
			}},
		"address on the second interface only": {state: store.StateReady, want: true,
			prepare: func(t *testing.T, s *store.Store, m store.Machine) store.Machine {
				mustAssign(t, s, store.AssignRequest{Machine: m.ID, MAC: macWeb1b, IP: addr("10.0.0.10")})
				return m
			}},
		"a lease is not a sticky address": {state: store.StateReady, want: true,
			prepare: func(t *testing.T, s *store.Store, m store.Machine) store.Machine {
				lease(t, s, macWeb1, link, "")
				return m
			}},
		"setting off": {opts: func(o *store.Options) { o.IPAM.StickyOnCommission = &off }, state: store.StateReady, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var opts []func(*store.Options)
			if tc.opts != nil {
				opts = append(opts, tc.opts)
			}
			s, _ := newIPAM(t, []store.Subnet{lab(), lab2()}, opts...)
			m := create(t, s, store.NewMachine{Hostname: "web1", State: tc.state, MACs: []string{macWeb1, macWeb1b}, Power: manual})
			if tc.prepare != nil {
				m = tc.prepare(t, s, m)
			}
			got, err := s.NeedsSticky(m)
			if err != nil || got != tc.want {
				t.Fatalf("NeedsSticky = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A reservation's name is unique within its domain, not across domains.
func TestReservationNamesPerDomain(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	for _, sn := range []store.Subnet{
		{CIDR: netip.MustParsePrefix("10.61.0.0/24"), Domain: "a.example"},
		{CIDR: netip.MustParsePrefix("10.62.0.0/24"), Domain: "b.example"},
		{CIDR: netip.MustParsePrefix("10.63.0.0/24"), Domain: "a.example"},
	} {
		if _, err := s.CreateSubnet(ctx, storetest.Admin, sn); err != nil {
			t.Fatal(err)
		}
	}
	reserve := func(ip string) error {
		_, err := s.Reserve(ctx, storetest.Admin, store.ReserveRequest{IP: netip.MustParseAddr(ip), Hostname: "sw1"})
		return err
	}
	if err := reserve("10.61.0.5"); err != nil {
		t.Fatal(err)
	}
	if err := reserve("10.62.0.5"); err != nil {
		t.Fatalf("the same name in another domain: %v", err)
	}
	if err := reserve("10.63.0.5"); store.CodeOf(err) != store.CodeConflict {
		t.Fatalf("the same name in the same domain: %v; want conflict", err)
	}
}

// TestAssignKeepCurrent: a request for "an address" that keeps the current
// one is answered, in the assignment's transaction, with the interface's
// sticky address when it has one, and changes nothing; otherwise it assigns
// as any request does (the candidate when given).
func TestAssignKeepCurrent(t *testing.T) {
	tests := map[string]struct {
		req      store.AssignRequest
		actor    store.Actor // admin when zero
		want     string
		existing bool
		code     store.Code
	}{
		"has one": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, KeepCurrent: true},
			want: "10.0.0.10", existing: true},
		"has one in the subnet asked for": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: labNet, KeepCurrent: true},
			want: "10.0.0.10", existing: true},
		"a candidate is not taken when it has one": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Candidate: addr("10.0.0.20"), KeepCurrent: true},
			want: "10.0.0.10", existing: true},
		"none in the subnet asked for": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: lab2Net, KeepCurrent: true},
			want: "10.0.1.2"},
		"an interface without one": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1b, Subnet: labNet, KeepCurrent: true},
			want: "10.0.0.3"},
		"an interface without one, with a candidate": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1b, Subnet: labNet,
			Candidate: addr("10.0.0.20"), KeepCurrent: true}, want: "10.0.0.20"},
		"a candidate taken meanwhile": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1b, Subnet: labNet,
			Candidate: addr("10.0.0.10"), KeepCurrent: true}, code: store.CodeIPInUse},
		"an alias is always new": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, Subnet: labNet, Alias: true, KeepCurrent: true},
			want: "10.0.0.3"},
		"an address asked for is that address": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.11"), KeepCurrent: true},
			want: "10.0.0.11"},
		"a stranger is told no, not the address": {req: store.AssignRequest{Machine: "web1", MAC: macWeb1, KeepCurrent: true},
			actor: bob, code: store.CodeForbidden},
		"not the machine's interface": {req: store.AssignRequest{Machine: "web1", MAC: macWeb2, KeepCurrent: true},
			code: store.CodeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := webRack(t, []store.Subnet{lab(), lab2()})
			withSticky(t, s, nil)
			actor := tc.actor
			if actor.Name == "" {
				actor = storetest.Admin
			}
			before, addrsBefore := snap(t, s), addressMap(t, s)
			// What AssignCandidate proposes is what the assignment takes,
			// and nothing when it keeps the current address.
			cand, need, cerr := s.AssignCandidate(tc.req)
			res, err := s.AssignMachineAddress(bg, actor, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				before.mustEqual(t, snap(t, s))
				unchanged(t, s, addrsBefore)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Address.IP.String() != tc.want || res.Existing != tc.existing {
				t.Fatalf("assigned %s (existing %v), want %s (existing %v)", res.Address.IP, res.Existing, tc.want, tc.existing)
			}
			if tc.existing {
				before.mustEqual(t, snap(t, s))
				unchanged(t, s, addrsBefore)
				if cerr != nil || need {
					t.Errorf("AssignCandidate = %s, %v, %v; want nothing to probe", cand, need, cerr)
				}
				return
			}
			if e := lastEvent(t, s, "web1"); !strings.HasPrefix(e.Reason, tc.want+" on ") {
				t.Errorf("event %+v, want one for %s", e, tc.want)
			}
			if !tc.req.IP.IsValid() && !tc.req.Candidate.IsValid() && (cerr != nil || !need || cand.String() != tc.want) {
				t.Errorf("AssignCandidate = %s, %v, %v; want %s", cand, need, cerr, tc.want)
			}
			// Asked again, the same answer, and nothing changes.
			if tc.req.Alias || tc.req.IP.IsValid() {
				return
			}
			again, before := tc.req, snap(t, s)
			again.Candidate = netip.Addr{}
			res2, err := s.AssignMachineAddress(bg, actor, again)
			if err != nil || res2.Address != res.Address || !res2.Existing {
				t.Errorf("asked again: %+v, %v; want %+v, existing", res2, err, res.Address)
			}
			before.mustEqual(t, snap(t, s))
		})
	}
}
