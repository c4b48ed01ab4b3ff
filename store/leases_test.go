package store_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// onePool is lab with a dynamic range of a single address, 10.0.0.100.
func onePool() store.Subnet {
	sn := lab()
	sn.DynamicRanges = []store.Range{rng("10.0.0.100", "10.0.0.100")}
	return sn
}

type ipamSetup func(t *testing.T, s *store.Store, clk *fakeClock)

func TestDHCPOffer(t *testing.T) {
	tests := map[string]struct {
		setup ipamSetup
		req   store.LeaseRequest
		code  store.Code
		want  string // the address offered; "" for any of lab's dynamic range but not
		not   string
		probe bool
		lease time.Duration
	}{
		"first free address": {req: store.LeaseRequest{MAC: macA, Link: link}, want: "10.0.0.100", probe: true, lease: time.Hour},
		"MAC normalised":     {req: store.LeaseRequest{MAC: "52-54-00-AA-00-01", Link: link}, want: "10.0.0.100", probe: true, lease: time.Hour},
		"IPv4-mapped link":   {req: store.LeaseRequest{MAC: macA, Link: addr("::ffff:10.0.0.1")}, want: "10.0.0.100", probe: true, lease: time.Hour},
		"relayed":            {req: store.LeaseRequest{MAC: macA, Link: link2}, want: "10.0.1.100", probe: true, lease: 2 * time.Hour},
		"requested, free":    {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, want: "10.0.0.150", probe: true, lease: time.Hour},
		"requested outside the dynamic range": {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.50")},
			want: "10.0.0.100", probe: true, lease: time.Hour},
		"requested in the reserved range": {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.205")},
			want: "10.0.0.100", probe: true, lease: time.Hour},
		"requested in another subnet": {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.1.150")},
			want: "10.0.0.100", probe: true, lease: time.Hour},
		"requested, leased to another": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macB, link, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, not: "10.0.0.150", probe: true, lease: time.Hour},
		"requested, offered to another": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.150")})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, not: "10.0.0.150", probe: true, lease: time.Hour},
		"requested, reserved": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.150")})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, not: "10.0.0.150", probe: true, lease: time.Hour},
		"requested, quarantined": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { mustQuarantine(t, s, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, not: "10.0.0.150", probe: true, lease: time.Hour},
		"its live lease, no probe": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macA, link, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link}, want: "10.0.0.150", probe: false, lease: time.Hour},
		"its live lease beats the requested address": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macA, link, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.160")}, want: "10.0.0.150", probe: false, lease: time.Hour},
		"its expired lease, still free, probed again": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
				lease(t, s, macA, link, "10.0.0.150")
				clk.Advance(2 * time.Hour)
			},
			req: store.LeaseRequest{MAC: macA, Link: link}, want: "10.0.0.150", probe: true, lease: time.Hour},
		"its expired lease, taken meanwhile": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
				lease(t, s, macA, link, "10.0.0.150")
				clk.Advance(2 * time.Hour)
				lease(t, s, macB, link, "10.0.0.150")
			},
			req: store.LeaseRequest{MAC: macA, Link: link}, not: "10.0.0.150", probe: true, lease: time.Hour},
		"no subnet on the link": {req: store.LeaseRequest{MAC: macA, Link: addr("192.168.9.1")}, code: store.CodeNoSubnet},
		"no link":               {req: store.LeaseRequest{MAC: macA}, code: store.CodeNoSubnet},
		"subnet without a dynamic range": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustSubnet(t, s, store.Subnet{CIDR: pfx("10.0.2.0/24")})
			},
			req: store.LeaseRequest{MAC: macA, Link: addr("10.0.2.1")}, code: store.CodeExhausted},
		"bad MAC": {req: store.LeaseRequest{MAC: "xyz", Link: link}, code: store.CodeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := newIPAM(t, []store.Subnet{lab(), lab2()})
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			before := addressMap(t, s)
			g, err := s.DHCPOffer(bg, tc.req)
			unchanged(t, s, before) // an offer writes nothing
			if tc.code != "" {
				wantCode(t, err, tc.code)
				return
			}
			if err != nil {
				t.Fatalf("DHCPOffer: %v", err)
			}
			ip := g.Address.IP
			switch {
			case tc.want != "" && ip != addr(tc.want):
				t.Errorf("offered %s, want %s", ip, tc.want)
			case tc.want == "" && (ip == addr(tc.not) || !lab().DynamicRanges[0].Contains(ip)):
				t.Errorf("offered %s, want an address of lab's dynamic range other than %s", ip, tc.not)
			}
			if g.Address.MAC != macA || g.Address.Kind != store.KindDynamic || !g.Subnet.CIDR.Contains(ip) ||
				g.Address.Subnet != g.Subnet.CIDR {
				t.Errorf("grant %+v", g)
			}
			if g.Probe != tc.probe {
				t.Errorf("Probe = %v, want %v", g.Probe, tc.probe)
			}
			if g.LeaseTime != tc.lease {
				t.Errorf("lease time %s, want %s", g.LeaseTime, tc.lease)
			}
			if g.Name != "" {
				t.Errorf("an unknown client is named %q", g.Name)
			}
		})
	}
}

// TestOfferHold: an offered address is held for its client, for
// IPAMOptions.OfferHold, and only for it.
func TestOfferHold(t *testing.T) {
	type step struct {
		mac     string
		lnk     netip.Addr // default link
		ask     string
		advance time.Duration // before the step
		want    string
	}
	tests := map[string][]step{
		"asking again gets the same address": {
			{mac: macA, want: "10.0.0.100"},
			{mac: macA, want: "10.0.0.100"},
			{mac: macB, want: "10.0.0.101"},
			{mac: macA, want: "10.0.0.100"},
			{mac: macB, want: "10.0.0.101"},
		},
		"held from others": {
			{mac: macA, want: "10.0.0.100"},
			{mac: macC, ask: "10.0.0.100", want: "10.0.0.101"},
			{mac: macA, ask: "10.0.0.100", want: "10.0.0.100"},
		},
		"hold expires": {
			{mac: macA, want: "10.0.0.100"},
			{mac: macC, ask: "10.0.0.100", advance: 29 * time.Second, want: "10.0.0.101"},
			{mac: macC, ask: "10.0.0.100", advance: 2 * time.Second, want: "10.0.0.100"},
			{mac: macA, want: "10.0.0.102"},
		},
		"asking for another address lets the first go": {
			{mac: macA, want: "10.0.0.100"},
			{mac: macA, ask: "10.0.0.150", want: "10.0.0.150"},
			{mac: macC, ask: "10.0.0.100", want: "10.0.0.100"},
			{mac: macA, want: "10.0.0.150"},
		},
		"one hold per subnet": {
			{mac: macA, want: "10.0.0.100"},
			{mac: macA, lnk: link2, want: "10.0.1.100"},
			{mac: macA, want: "10.0.0.100"},
			{mac: macA, lnk: link2, want: "10.0.1.100"},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := newIPAM(t, []store.Subnet{lab(), lab2()})
			for i, st := range steps {
				clk.Advance(st.advance)
				req := store.LeaseRequest{MAC: st.mac, Link: link}
				if st.lnk.IsValid() {
					req.Link = st.lnk
				}
				if st.ask != "" {
					req.IP = addr(st.ask)
				}
				g, err := s.DHCPOffer(bg, req)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if g.Address.IP != addr(st.want) {
					t.Fatalf("step %d: %s (asking %q) was offered %s, want %s", i, st.mac, st.ask, g.Address.IP, st.want)
				}
			}
			if ls := leaseMap(t, s); len(ls) != 0 {
				t.Errorf("offers alone made leases: %v", ls)
			}
		})
	}
}

func TestDHCPAck(t *testing.T) {
	tests := map[string]struct {
		setup ipamSetup
		req   store.LeaseRequest
		code  store.Code
		lease time.Duration
	}{
		"the offered address": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")}, lease: time.Hour},
		"INIT-REBOOT, free dynamic address": {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, lease: time.Hour},
		"relayed":                           {req: store.LeaseRequest{MAC: macA, Link: link2, IP: addr("10.0.1.150")}, lease: 2 * time.Hour},
		"address of another subnet":         {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.1.150")}, code: store.CodeNak},
		"unmanaged address":                 {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("192.168.0.5")}, code: store.CodeNak},
		"no address":                        {req: store.LeaseRequest{MAC: macA, Link: link}, code: store.CodeNak},
		"outside the dynamic range":         {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.50")}, code: store.CodeNak},
		"in the reserved range":             {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.205")}, code: store.CodeNak},
		"the gateway":                       {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.1")}, code: store.CodeNak},
		"leased to another MAC": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macB, link, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, code: store.CodeNak},
		"expired lease of another MAC": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
				lease(t, s, macB, link, "10.0.0.150")
				clk.Advance(time.Hour)
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, lease: time.Hour},
		"offered to another MAC": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macB, Link: link})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")}, code: store.CodeNak},
		"offered to another MAC, hold expired": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macB, Link: link})
				clk.Advance(time.Minute)
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")}, lease: time.Hour},
		"quarantined": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { mustQuarantine(t, s, "10.0.0.150") },
			req:   store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, code: store.CodeNak},
		"reserved inside the dynamic range": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.150")})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")}, code: store.CodeNak},
		"a machine's sticky address": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				machineWith(t, s, "web1", macWeb1)
				mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
			},
			req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.10")}, code: store.CodeNak},
		"no subnet on the link": {req: store.LeaseRequest{MAC: macA, Link: addr("192.168.9.1"), IP: addr("192.168.9.50")}, code: store.CodeNoSubnet},
		"bad MAC":               {req: store.LeaseRequest{MAC: "52:54:00", Link: link, IP: addr("10.0.0.150")}, code: store.CodeInvalid},
		"PXE":                   {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150"), PXE: true}, lease: 10 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := newIPAM(t, []store.Subnet{lab(), lab2()})
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			before := addressMap(t, s)
			g, err := s.DHCPAck(bg, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				return
			}
			if err != nil {
				t.Fatalf("DHCPAck: %v", err)
			}
			a := g.Address
			if a.IP != tc.req.IP || a.MAC != macA || a.Kind != store.KindDynamic || g.Subnet.CIDR != a.Subnet || !a.Subnet.Contains(a.IP) {
				t.Errorf("grant %+v", g)
			}
			if g.LeaseTime != tc.lease || !a.Expires.Equal(clk.Now().Add(tc.lease)) {
				t.Errorf("lease time %s expiring %s, want %s from %s", g.LeaseTime, a.Expires, tc.lease, clk.Now())
			}
			if g.Probe {
				t.Errorf("an ACK asks for a probe")
			}
			if got := leaseMap(t, s)[tc.req.IP]; got != macA {
				t.Errorf("Leases() has %s for %q, want %s", tc.req.IP, got, macA)
			}
		})
	}
}

// TestDHCPRenew: acking the same address again extends the lease and keeps
// its creation time.
func TestDHCPRenew(t *testing.T) {
	s, clk := newIPAM(t, []store.Subnet{lab()})
	first := mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")})
	clk.Advance(40 * time.Minute)
	again := mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150")})
	if want := t0.Add(40*time.Minute + time.Hour); !again.Address.Expires.Equal(want) {
		t.Errorf("renewed lease expires %s, want %s", again.Address.Expires, want)
	}
	if !again.Address.Created.Equal(first.Address.Created) {
		t.Errorf("renewal changed Created from %s to %s", first.Address.Created, again.Address.Created)
	}
	clk.Advance(59 * time.Minute) // past the first lease's end, inside the renewed one
	ls, err := s.Leases()
	if err != nil || len(ls) != 1 || !ls[0].Expires.Equal(again.Address.Expires) {
		t.Fatalf("Leases() = %+v, %v", ls, err)
	}
	_, err = s.DHCPAck(bg, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.150")})
	wantCode(t, err, store.CodeNak)
}

// TestOneLeasePerMAC: a client moving to another address of a subnet drops
// the old one; leases in other subnets stay.
func TestOneLeasePerMAC(t *testing.T) {
	s, _ := newIPAM(t, []store.Subnet{lab(), lab2()})
	lease(t, s, macA, link, "10.0.0.150")
	lease(t, s, macA, link2, "10.0.1.150")
	mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.160")})
	want := map[netip.Addr]string{addr("10.0.0.160"): macA, addr("10.0.1.150"): macA}
	if got := leaseMap(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("leases %v, want %v", got, want)
	}
	// The old address is free for someone else at once.
	mustAck(t, s, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.150")})
	// And the client's next offer is its current lease.
	if g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != addr("10.0.0.160") {
		t.Errorf("offered %s, want its lease 10.0.0.160", g.Address.IP)
	}
}

func TestPXELease(t *testing.T) {
	tests := map[string]struct {
		subnetLease int
		pxeLease    time.Duration
		pxe         bool
		sticky      bool
		want        time.Duration
	}{
		"PXE, default":             {3600, 0, true, false, 10 * time.Minute},
		"PXE, configured":          {3600, 2 * time.Minute, true, false, 2 * time.Minute},
		"not PXE":                  {3600, 2 * time.Minute, false, false, time.Hour},
		"subnet lease shorter":     {300, 10 * time.Minute, true, false, 5 * time.Minute},
		"known machine is not cut": {3600, 2 * time.Minute, true, true, time.Hour},
		"equal":                    {600, 10 * time.Minute, true, false, 10 * time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sn := lab()
			sn.LeaseSeconds = tc.subnetLease
			s, clk := newIPAM(t, []store.Subnet{sn}, func(o *store.Options) { o.IPAM.PXELease = tc.pxeLease })
			m := macA
			if tc.sticky {
				machineWith(t, s, "web1", macWeb1)
				mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
				m = macWeb1
			}
			o := mustOffer(t, s, store.LeaseRequest{MAC: m, Link: link, PXE: tc.pxe})
			a := mustAck(t, s, store.LeaseRequest{MAC: m, Link: link, PXE: tc.pxe, IP: o.Address.IP})
			if o.LeaseTime != tc.want || a.LeaseTime != tc.want {
				t.Errorf("offer %s, ack %s; want %s", o.LeaseTime, a.LeaseTime, tc.want)
			}
			if !tc.sticky && !a.Address.Expires.Equal(clk.Now().Add(tc.want)) {
				t.Errorf("lease expires %s, want %s", a.Address.Expires, clk.Now().Add(tc.want))
			}
		})
	}
}

// TestLeaseExpiry: an expired lease is free for another client.
func TestLeaseExpiry(t *testing.T) {
	s, clk := newIPAM(t, []store.Subnet{onePool()})
	lease(t, s, macA, link, "10.0.0.100")
	clk.Advance(time.Hour - time.Second)
	_, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: macB, Link: link})
	wantCode(t, err, store.CodeExhausted)
	_, err = s.DHCPAck(bg, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.100")})
	wantCode(t, err, store.CodeNak)

	clk.Advance(time.Second) // the lease ends now
	if ls := leaseMap(t, s); len(ls) != 0 {
		t.Errorf("an expired lease is listed: %v", ls)
	}
	if got := lease(t, s, macB, link, ""); got != addr("10.0.0.100") {
		t.Fatalf("got %s after the lease expired, want 10.0.0.100", got)
	}
	if ls := leaseMap(t, s); len(ls) != 1 || ls[addr("10.0.0.100")] != macB {
		t.Errorf("leases %v, want 10.0.0.100 for %s", ls, macB)
	}
	// The first client, back, finds its address taken.
	_, err = s.DHCPOffer(bg, store.LeaseRequest{MAC: macA, Link: link})
	wantCode(t, err, store.CodeExhausted)
}

func TestExhausted(t *testing.T) {
	two := lab()
	two.DynamicRanges = []store.Range{rng("10.0.0.100", "10.0.0.101")}
	tests := map[string]ipamSetup{
		"offered": func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
			mustOffer(t, s, store.LeaseRequest{MAC: macB, Link: link})
		},
		"leased": func(t *testing.T, s *store.Store, _ *fakeClock) {
			lease(t, s, macA, link, "")
			lease(t, s, macB, link, "")
		},
		"quarantined": func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustQuarantine(t, s, "10.0.0.100")
			mustQuarantine(t, s, "10.0.0.101")
		},
		"reserved and leased": func(t *testing.T, s *store.Store, _ *fakeClock) {
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.101"), MAC: macSw})
			lease(t, s, macA, link, "")
		},
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := newIPAM(t, []store.Subnet{two})
			setup(t, s, clk)
			_, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: macC, Link: link})
			wantCode(t, err, store.CodeExhausted)
			_, err = s.DHCPOffer(bg, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.100")})
			wantCode(t, err, store.CodeExhausted)
		})
	}
}

// TestKnownClients: a machine's interface gets its sticky address and a
// reserved MAC its reservation, exactly, and nobody else gets either.
func TestKnownClients(t *testing.T) {
	const sticky, reserved = "10.0.0.10", "10.0.0.150" // the reservation lies in the dynamic range
	tests := map[string]struct {
		ack  bool
		req  store.LeaseRequest
		code store.Code
		want string
		name string
	}{
		"machine offered its sticky address":            {req: store.LeaseRequest{MAC: macWeb1, Link: link}, want: sticky, name: "web1"},
		"machine asking for another is offered its own": {req: store.LeaseRequest{MAC: macWeb1, Link: link, IP: addr("10.0.0.120")}, want: sticky, name: "web1"},
		"machine acked its sticky address":              {ack: true, req: store.LeaseRequest{MAC: macWeb1, Link: link, IP: addr(sticky)}, want: sticky, name: "web1"},
		"machine acking a dynamic address":              {ack: true, req: store.LeaseRequest{MAC: macWeb1, Link: link, IP: addr("10.0.0.120")}, code: store.CodeNak},
		"machine acking the reservation":                {ack: true, req: store.LeaseRequest{MAC: macWeb1, Link: link, IP: addr(reserved)}, code: store.CodeNak},
		"machine on a subnet without its sticky":        {req: store.LeaseRequest{MAC: macWeb1, Link: link2}, want: "10.0.1.100"},
		"switch offered its reservation":                {req: store.LeaseRequest{MAC: macSw, Link: link}, want: reserved, name: "sw1"},
		"switch acked its reservation":                  {ack: true, req: store.LeaseRequest{MAC: macSw, Link: link, IP: addr(reserved)}, want: reserved, name: "sw1"},
		"switch acking another address":                 {ack: true, req: store.LeaseRequest{MAC: macSw, Link: link, IP: addr("10.0.0.120")}, code: store.CodeNak},
		"stranger acking the sticky address":            {ack: true, req: store.LeaseRequest{MAC: macA, Link: link, IP: addr(sticky)}, code: store.CodeNak},
		"stranger acking the reservation":               {ack: true, req: store.LeaseRequest{MAC: macA, Link: link, IP: addr(reserved)}, code: store.CodeNak},
		"stranger asking for the reservation":           {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr(reserved)}, want: "10.0.0.100"},
		"stranger asking for the sticky address":        {req: store.LeaseRequest{MAC: macA, Link: link, IP: addr(sticky)}, want: "10.0.0.100"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, []store.Subnet{lab(), lab2()})
			machineWith(t, s, "web1", macWeb1)
			mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr(sticky)})
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr(reserved), MAC: macSw, Hostname: "sw1"})
			before := addressMap(t, s)
			op := s.DHCPOffer
			if tc.ack {
				op = s.DHCPAck
			}
			g, err := op(bg, tc.req)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.Address.IP != addr(tc.want) || g.Name != tc.name {
				t.Errorf("got %s named %q, want %s named %q", g.Address.IP, g.Name, tc.want, tc.name)
			}
			if known := tc.name != ""; known {
				if g.Probe {
					t.Error("a known client's own address is probed")
				}
				if g.LeaseTime != time.Hour {
					t.Errorf("lease time %s, want the subnet's", g.LeaseTime)
				}
				// Answering a known client changes nothing.
				unchanged(t, s, before)
			}
		})
	}
}

func TestDHCPRelease(t *testing.T) {
	tests := map[string]struct {
		mac, ip string
		code    store.Code
		freed   bool
	}{
		"own lease":          {mac: macA, ip: "10.0.0.150", freed: true},
		"own lease, mapped":  {mac: macA, ip: "::ffff:10.0.0.150", freed: true},
		"another's lease":    {mac: macB, ip: "10.0.0.150"},
		"its reservation":    {mac: macSw, ip: "10.0.0.30"},
		"its sticky address": {mac: macWeb1, ip: "10.0.0.10"},
		"a free address":     {mac: macA, ip: "10.0.0.160"},
		"unmanaged address":  {mac: macA, ip: "192.168.0.1"},
		"bad MAC":            {mac: "nope", ip: "10.0.0.150", code: store.CodeInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newIPAM(t, []store.Subnet{lab()})
			machineWith(t, s, "web1", macWeb1)
			mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw})
			lease(t, s, macA, link, "10.0.0.150")
			before := addressMap(t, s)
			err := s.DHCPRelease(bg, tc.mac, addr(tc.ip))
			if tc.code != "" {
				wantCode(t, err, tc.code)
			} else if err != nil {
				t.Fatal(err)
			}
			if !tc.freed {
				unchanged(t, s, before)
				return
			}
			if ls := leaseMap(t, s); len(ls) != 0 {
				t.Errorf("leases after release: %v", ls)
			}
			mustAck(t, s, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.150")})
		})
	}
}

// TestQuarantine: a declined or probed address is kept out of the pool
// until the quarantine ends; sticky and reserved addresses are never
// overwritten.
func TestQuarantine(t *testing.T) {
	const quarantine = 20 * time.Minute
	tests := map[string]struct {
		setup ipamSetup
		act   func(s *store.Store) error
		code  store.Code
	}{
		"client declines its lease": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macA, link, "10.0.0.100") },
			act:   func(s *store.Store) error { return s.DHCPDecline(bg, macA, addr("10.0.0.100")) },
		},
		"client declines its offer": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
			},
			act: func(s *store.Store) error { return s.DHCPDecline(bg, macA, addr("10.0.0.100")) },
		},
		"client declines a free address": {
			act: func(s *store.Store) error { return s.DHCPDecline(bg, macA, addr("10.0.0.100")) },
		},
		"client declines an expired lease of another": {
			setup: func(t *testing.T, s *store.Store, clk *fakeClock) {
				lease(t, s, macB, link, "10.0.0.100")
				clk.Advance(time.Hour)
			},
			act: func(s *store.Store) error { return s.DHCPDecline(bg, macA, addr("10.0.0.100")) },
		},
		"probe answered": {
			act: func(s *store.Store) error { return s.Quarantine(bg, addr("10.0.0.100"), "52:54:00:ee:ee:ee", "arp") },
		},
		"probe answered by a bad MAC": {
			act: func(s *store.Store) error { return s.Quarantine(bg, addr("10.0.0.100"), "garbage", "arp") },
		},
		"probe answered for an offered address": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) {
				mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link})
			},
			act: func(s *store.Store) error { return s.Quarantine(bg, addr("10.0.0.100"), "", "arp") },
		},
		"client declines another's lease": {
			setup: func(t *testing.T, s *store.Store, _ *fakeClock) { lease(t, s, macB, link, "10.0.0.100") },
			act:   func(s *store.Store) error { return s.DHCPDecline(bg, macA, addr("10.0.0.100")) },
			code:  store.CodeIPInUse,
		},
		"machine declines its sticky address": {
			act:  func(s *store.Store) error { return s.DHCPDecline(bg, macWeb1, addr("10.0.0.10")) },
			code: store.CodeIPInUse,
		},
		"switch declines its reservation": {
			act:  func(s *store.Store) error { return s.DHCPDecline(bg, macSw, addr("10.0.0.30")) },
			code: store.CodeIPInUse,
		},
		"probe answered for a sticky address": {
			act:  func(s *store.Store) error { return s.Quarantine(bg, addr("10.0.0.10"), "", "arp") },
			code: store.CodeIPInUse,
		},
		"probe answered for a reservation": {
			act:  func(s *store.Store) error { return s.Quarantine(bg, addr("10.0.0.30"), "", "arp") },
			code: store.CodeIPInUse,
		},
		"unmanaged address": {
			act:  func(s *store.Store) error { return s.Quarantine(bg, addr("192.168.0.1"), "", "arp") },
			code: store.CodeNoSubnet,
		},
		"decline with a bad MAC": {
			act:  func(s *store.Store) error { return s.DHCPDecline(bg, "x", addr("10.0.0.100")) },
			code: store.CodeInvalid,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, clk := newIPAM(t, []store.Subnet{onePool()}, func(o *store.Options) { o.IPAM.Quarantine = quarantine })
			machineWith(t, s, "web1", macWeb1)
			mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
			mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw, Hostname: "sw1"})
			if tc.setup != nil {
				tc.setup(t, s, clk)
			}
			before := addressMap(t, s)
			err := tc.act(s)
			if tc.code != "" {
				wantCode(t, err, tc.code)
				unchanged(t, s, before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			start := clk.Now()
			a, ok := addressMap(t, s)[addr("10.0.0.100")]
			if !ok || a.Kind != store.KindDiscovered || !a.Expires.Equal(start.Add(quarantine)) {
				t.Fatalf("10.0.0.100 is %+v, want discovered until %s", a, start.Add(quarantine))
			}
			if ls := leaseMap(t, s); len(ls) != 0 {
				t.Errorf("leases %v", ls)
			}
			for _, m := range []string{macA, macB, macC} {
				_, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: m, Link: link, IP: addr("10.0.0.100")})
				wantCode(t, err, store.CodeExhausted)
			}
			_, err = s.DHCPAck(bg, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")})
			wantCode(t, err, store.CodeNak)
			_, err = s.Reserve(bg, alice, store.ReserveRequest{IP: addr("10.0.0.100")})
			wantCode(t, err, store.CodeIPInUse)

			clk.Advance(quarantine - time.Second)
			_, err = s.DHCPOffer(bg, store.LeaseRequest{MAC: macC, Link: link})
			wantCode(t, err, store.CodeExhausted)
			clk.Advance(time.Second)
			if got := lease(t, s, macC, link, ""); got != addr("10.0.0.100") {
				t.Errorf("after the quarantine got %s, want 10.0.0.100", got)
			}
		})
	}
}

// TestExpireAddresses: expired leases and quarantines are deleted; nothing
// else is.
func TestExpireAddresses(t *testing.T) {
	s, clk := newIPAM(t, []store.Subnet{lab()})
	machineWith(t, s, "web1", macWeb1)
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30")})
	lease(t, s, macA, link, "10.0.0.150")
	mustQuarantine(t, s, "10.0.0.151")
	if n, err := s.ExpireAddresses(bg); err != nil || n != 0 {
		t.Fatalf("ExpireAddresses() = %d, %v before anything expired", n, err)
	}
	clk.Advance(30 * time.Minute)
	lease(t, s, macB, link, "10.0.0.152") // still live at the end
	clk.Advance(45 * time.Minute)
	if n, err := s.ExpireAddresses(bg); err != nil || n != 2 {
		t.Fatalf("ExpireAddresses() = %d, %v; want 2", n, err)
	}
	var got []string
	for ip, a := range addressMap(t, s) {
		got = append(got, ip.String()+" "+string(a.Kind))
	}
	slices.Sort(got)
	if want := []string{"10.0.0.10 sticky", "10.0.0.152 dynamic", "10.0.0.30 reserved"}; !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	// Its address is free for anyone.
	mustAck(t, s, store.LeaseRequest{MAC: macC, Link: link, IP: addr("10.0.0.150")})
}

func TestPoolUsage(t *testing.T) {
	s, clk := newIPAM(t, []store.Subnet{lab(), lab2()})
	lease(t, s, macA, link, "")
	lease(t, s, macB, link, "")
	mustQuarantine(t, s, "10.0.0.190")
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.191")})
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.50")}) // not in the pool
	mustOffer(t, s, store.LeaseRequest{MAC: macC, Link: link})            // not a use yet
	lease(t, s, macA, link2, "")
	got, err := s.PoolUsage()
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix][2]uint64{labNet: {100, 4}, lab2Net: {100, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PoolUsage() = %v, want %v", got, want)
	}
	clk.Advance(90 * time.Minute) // lab's leases and the quarantine are over
	got, _ = s.PoolUsage()
	if want := (map[netip.Prefix][2]uint64{labNet: {100, 1}, lab2Net: {100, 1}}); !reflect.DeepEqual(got, want) {
		t.Errorf("later PoolUsage() = %v, want %v (lab2's lease is 2h)", got, want)
	}
}

// TestDHCPConcurrent: many clients at once, each offered and acked through
// the group committer, get distinct addresses.
func TestDHCPConcurrent(t *testing.T) {
	sn := store.Subnet{CIDR: pfx("10.9.0.0/24"), Gateway: addr("10.9.0.254"), LeaseSeconds: 3600,
		DynamicRanges: []store.Range{rng("10.9.0.1", "10.9.0.250")}}
	s := storetest.New(t)
	mustSubnet(t, s, sn)
	lnk := addr("10.9.0.254")
	const clients = 200
	got := make([]netip.Addr, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			m := mac(0x10000 + i)
			g, err := s.DHCPOffer(bg, store.LeaseRequest{MAC: m, Link: lnk, Hostname: fmt.Sprintf("client%d", i)})
			if err != nil {
				errs[i] = fmt.Errorf("offer: %w", err)
				return
			}
			g2, err := s.DHCPAck(bg, store.LeaseRequest{MAC: m, Link: lnk, IP: g.Address.IP})
			if err != nil {
				errs[i] = fmt.Errorf("ack of %s: %w", g.Address.IP, err)
				return
			}
			got[i] = g2.Address.IP
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, ip := range got {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		if j, dup := seen[ip]; dup {
			t.Fatalf("clients %d and %d both got %s", j, i, ip)
		}
		if !sn.DynamicRanges[0].Contains(ip) {
			t.Fatalf("client %d got %s, outside the pool", i, ip)
		}
		seen[ip] = i
	}
	ls := leaseMap(t, s)
	if len(ls) != clients {
		t.Errorf("%d leases, want %d", len(ls), clients)
	}
	for i, ip := range got {
		if ls[ip] != mac(0x10000+i) {
			t.Errorf("%s is leased to %q, want %s", ip, ls[ip], mac(0x10000+i))
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	usage, err := s.PoolUsage()
	if err != nil || usage[sn.CIDR] != [2]uint64{250, clients} {
		t.Errorf("PoolUsage() = %v, %v; want %v: [250 %d]", usage, err, sn.CIDR, clients)
	}
}

// TestLeasesSurviveReopen: what was acked is on disk.
func TestLeasesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustSubnet(t, s, lab())
	machineWith(t, s, "web1", macWeb1)
	mustAssign(t, s, store.AssignRequest{Machine: "web1", MAC: macWeb1, IP: addr("10.0.0.10")})
	mustReserve(t, s, alice, store.ReserveRequest{IP: addr("10.0.0.30"), MAC: macSw, Hostname: "sw1"})
	acked := mustAck(t, s, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.150"), Hostname: "laptop"})
	before := addressMap(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ls, err := s.Leases()
	if err != nil || len(ls) != 1 {
		t.Fatalf("Leases() after reopen = %+v, %v", ls, err)
	}
	if l := ls[0]; l.IP != acked.Address.IP || l.MAC != macA || l.Hostname != "laptop" || !l.Expires.Equal(acked.Address.Expires) {
		t.Errorf("lease after reopen %+v, want %+v", l, acked.Address)
	}
	unchanged(t, s, before)
	if g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != acked.Address.IP || g.Probe {
		t.Errorf("after reopen the client is offered %s (probe %v), want its lease %s", g.Address.IP, g.Probe, acked.Address.IP)
	}
	if g := mustOffer(t, s, store.LeaseRequest{MAC: macWeb1, Link: link}); g.Address.IP != addr("10.0.0.10") || g.Name != "web1" {
		t.Errorf("after reopen the machine is offered %s named %q", g.Address.IP, g.Name)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestDeclineRacesAck: a DHCPDECLINE checked while another client's ACK of
// the same address waits in the committer must not quarantine that
// client's fresh lease: whichever the committer takes first wins and the
// other is refused, in either order.
func TestDeclineRacesAck(t *testing.T) {
	for _, declineFirst := range []bool{false, true} {
		name := "ack first"
		if declineFirst {
			name = "decline first"
		}
		t.Run(name, func(t *testing.T) {
			var armed atomic.Bool
			entered, gate := make(chan struct{}), make(chan struct{})
			s, _ := newIPAM(t, []store.Subnet{onePool()}, func(o *store.Options) {
				o.OnCommit = func(int, time.Duration) {
					if armed.CompareAndSwap(true, false) {
						close(entered)
						<-gate // hold the committer
					}
				}
			})
			armed.Store(true)
			var wg sync.WaitGroup
			var reserveErr, ackErr, declineErr error
			wg.Go(func() { _, reserveErr = s.Reserve(bg, alice, store.ReserveRequest{IP: addr("10.0.0.30")}) })
			<-entered
			ack := func() {
				wg.Go(func() { _, ackErr = s.DHCPAck(bg, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.100")}) })
			}
			decline := func() { wg.Go(func() { declineErr = s.DHCPDecline(bg, macA, addr("10.0.0.100")) }) }
			first, second := ack, decline
			if declineFirst {
				first, second = decline, ack
			}
			// Each is queued (it has looked at the address, and waits
			// for the held committer) before the next is sent.
			first()
			waitQueued(t, s, 1)
			second()
			waitQueued(t, s, 2)
			close(gate)
			wg.Wait()
			if reserveErr != nil {
				t.Fatal(reserveErr)
			}
			a := addressMap(t, s)[addr("10.0.0.100")]
			if declineFirst {
				if declineErr != nil {
					t.Fatalf("the decline, first: %v", declineErr)
				}
				wantCode(t, ackErr, store.CodeNak)
				if a.Kind != store.KindDiscovered {
					t.Errorf("the declined address is %+v", a)
				}
				return
			}
			if ackErr != nil {
				t.Fatalf("the ACK, first: %v", ackErr)
			}
			wantCode(t, declineErr, store.CodeIPInUse)
			if a.Kind != store.KindDynamic || a.MAC != macB {
				t.Errorf("the acked lease became %+v", a)
			}
		})
	}
}

// waitQueued waits (5 s at most) until n operations wait for s's
// committer.
func waitQueued(t *testing.T, s *store.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for store.QueuedOps(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d operations queued, want %d", store.QueuedOps(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLeaseCommitPacing: a lease right after a commit waits for company
// (here up to an hour), and an impatient operation ends that wait and
// shares the commit.
func TestLeaseCommitPacing(t *testing.T) {
	var commits atomic.Int32
	var lastOps atomic.Int32
	s, _ := newIPAM(t, []store.Subnet{lab()}, func(o *store.Options) {
		o.IPAM.LeaseCommitDelay = time.Hour
		o.OnCommit = func(ops int, _ time.Duration) {
			commits.Add(1)
			lastOps.Store(int32(ops))
		}
	})
	// The subnet was committed just now: the lease waits for company.
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	before := commits.Load()
	acked := make(chan error, 1)
	go func() {
		_, err := s.DHCPAck(ctx, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")})
		acked <- err
	}()
	select {
	case err := <-acked:
		t.Fatalf("a lease right after a commit did not wait for company (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := s.Reserve(ctx, alice, store.ReserveRequest{IP: addr("10.0.0.30")}); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatal(err)
	}
	if n := commits.Load() - before; n != 1 || lastOps.Load() != 2 {
		t.Errorf("lease and reservation took %d commits (last of %d operations), want 1 of 2", n, lastOps.Load())
	}
}

// TestLeaseCommitBatch: leases that would wait for company (here up to an
// hour) commit as soon as LeaseCommitBatch of them wait, all in one commit,
// with no impatient operation to end the wait.
func TestLeaseCommitBatch(t *testing.T) {
	const batch = 8
	ops := make(chan int, 16)
	s, _ := newIPAM(t, []store.Subnet{lab()}, func(o *store.Options) {
		o.IPAM.LeaseCommitDelay = time.Hour
		o.IPAM.LeaseCommitBatch = batch
		o.OnCommit = func(n int, _ time.Duration) { ops <- n }
	})
	for len(ops) > 0 {
		<-ops // the subnet's commit: the leases below wait for company
	}
	done := make(chan error, batch)
	for i := range batch {
		req := store.LeaseRequest{MAC: fmt.Sprintf("02:00:00:00:01:%02x", i), Link: link, IP: addr(fmt.Sprintf("10.0.0.%d", 100+i))}
		if err := s.DHCPAckAsync(bg, req, func(_ store.Grant, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(30 * time.Second)
	for range batch {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("%d leases waiting did not start their commit", batch)
		}
	}
	if n := <-ops; n != batch {
		t.Errorf("the leases took a commit of %d operations, want one of %d", n, batch)
	}
}

// TestLeaseCommitAfterQuiet: once the previous commit is longer ago than
// the delay, a lease commits without waiting. (Counted from the lease's
// arrival instead, the delay would hold it back a further 3 s.)
func TestLeaseCommitAfterQuiet(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	s, _ := newIPAM(t, []store.Subnet{lab()}, func(o *store.Options) { o.IPAM.LeaseCommitDelay = delay })
	time.Sleep(delay + 100*time.Millisecond) // quiet for longer than the delay
	ctx, cancel := context.WithTimeout(bg, delay-500*time.Millisecond)
	defer cancel()
	if _, err := s.DHCPAck(ctx, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")}); err != nil {
		t.Fatalf("a lease after a quiet spell waited for company: %v", err)
	}
}

// TestDHCPAckAsync: the callback comes once per request, after the lease
// is committed (a read from inside it sees the lease), with the refusal for
// an address someone else holds.
func TestDHCPAckAsync(t *testing.T) {
	s, _ := newIPAM(t, []store.Subnet{lab()})
	type result struct {
		g       store.Grant
		err     error
		visible bool
	}
	results := make(chan result, 2)
	done := func(g store.Grant, err error) {
		leases, lerr := s.Leases()
		if lerr != nil {
			t.Error(lerr)
		}
		visible := false
		for _, a := range leases {
			visible = visible || (err == nil && a.IP == g.Address.IP && a.MAC == g.Address.MAC)
		}
		results <- result{g, err, visible}
	}
	if err := s.DHCPAckAsync(bg, store.LeaseRequest{MAC: macA, Link: link, IP: addr("10.0.0.100")}, done); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil || r.g.Address.IP != addr("10.0.0.100") || !r.visible {
		t.Fatalf("first ack: grant %+v, err %v, visible when called back: %v", r.g.Address, r.err, r.visible)
	}
	if err := s.DHCPAckAsync(bg, store.LeaseRequest{MAC: macB, Link: link, IP: addr("10.0.0.100")}, done); err != nil {
		t.Fatal(err)
	}
	r = <-results
	wantCode(t, r.err, store.CodeNak)
	select {
	case r := <-results:
		t.Fatalf("a callback came twice: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if err := s.DHCPAckAsync(bg, store.LeaseRequest{MAC: "not a mac", Link: link, IP: addr("10.0.0.101")}, done); err == nil {
		t.Fatal("a bad MAC was queued")
	}
}

// TestMACIndexAfterReopen: the in-memory MAC index is rebuilt from the
// addresses on open, so a client keeps its lease across a restart, and a
// lease moved within one batch (dropped and bound again) stays indexed.
func TestMACIndexAfterReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rackd.db")
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustSubnet(t, s, lab())
	for _, ip := range []string{"10.0.0.100", "10.0.0.101", "10.0.0.100"} {
		if _, err := s.DHCPAck(bg, store.LeaseRequest{MAC: macA, Link: link, IP: addr(ip)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != addr("10.0.0.100") {
		t.Fatalf("after reopen %s is offered %s, want its lease 10.0.0.100", macA, g.Address.IP)
	}
}

// TestMACIndexSameBatch: a client moving between addresses twice within one
// commit (its old lease dropped, a new one bound, and back) ends indexed at
// exactly its final lease.
func TestMACIndexSameBatch(t *testing.T) {
	s, _ := newIPAM(t, []store.Subnet{lab()}, func(o *store.Options) { o.IPAM.LeaseCommitDelay = time.Hour })
	done := make(chan error, 3)
	for _, ip := range []string{"10.0.0.100", "10.0.0.101", "10.0.0.100"} {
		if err := s.DHCPAckAsync(bg, store.LeaseRequest{MAC: macA, Link: link, IP: addr(ip)}, func(_ store.Grant, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
	}
	// An impatient operation ends the wait: all four share one commit.
	if _, err := s.Reserve(bg, alice, store.ReserveRequest{IP: addr("10.0.0.30")}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if g := mustOffer(t, s, store.LeaseRequest{MAC: macA, Link: link}); g.Address.IP != addr("10.0.0.100") {
		t.Fatalf("offered %s, want the lease 10.0.0.100", g.Address.IP)
	}
	if leases := addressMap(t, s); leases[addr("10.0.0.101")].MAC != "" {
		t.Fatalf("the dropped lease is still there: %+v", leases[addr("10.0.0.101")])
	}
}

// TestOnAnswered: the function registered runs on the committer after the
// commit has called back every asynchronous lease it holds, so that what
// the callbacks held back can go out at once; nil removes it.
func TestOnAnswered(t *testing.T) {
	const n = 4
	s, _ := newIPAM(t, []store.Subnet{lab()}, func(o *store.Options) {
		o.IPAM.LeaseCommitDelay = time.Hour // the leases below share a commit
		o.IPAM.LeaseCommitBatch = n
	})
	var mu sync.Mutex
	var seen []string
	note := func(what string) {
		mu.Lock()
		seen = append(seen, what)
		mu.Unlock()
	}
	ended := make(chan struct{}, 16)
	s.OnAnswered(func() { note("end"); ended <- struct{}{} })
	for i := range n {
		req := store.LeaseRequest{MAC: fmt.Sprintf("02:00:00:00:02:%02x", i), Link: link, IP: addr(fmt.Sprintf("10.0.0.%d", 100+i))}
		if err := s.DHCPAckAsync(bg, req, func(_ store.Grant, err error) {
			if err != nil {
				t.Error(err)
			}
			note("done")
		}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		dones := 0
		for _, w := range got {
			if w == "done" {
				dones++
			}
		}
		if dones == n && got[len(got)-1] == "end" {
			break
		}
		select {
		case <-ended:
		case <-deadline:
			t.Fatalf("after %d callbacks the commit did not end with the function registered: %v", dones, got)
		}
	}
	s.OnAnswered(nil)
	for len(ended) > 0 {
		<-ended
	}
	if err := s.DHCPRelease(bg, "02:00:00:00:02:00", addr("10.0.0.100")); err != nil {
		t.Fatal(err)
	}
	if len(ended) != 0 {
		t.Error("the function removed still ran after a commit")
	}
}
