package agent

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"rackd/api"
	"rackd/store"
)

// TestIPAMThroughAPI walks an operator's IPAM day through the API: a subnet, a machine
// that gets its sticky address when created READY, a reservation that is
// never taken, an override that returns the old address and says so, an
// alias, and a lease as DHCP would make it.
func TestIPAMThroughAPI(t *testing.T) {
	ta := startAgent(t)
	bob := ta.addUser(t, "bob", false)
	subnet := api.Subnet{CIDR: "10.20.0.0/24", Gateway: "10.20.0.1", DNSServers: []string{"10.20.0.1"}, Domain: "Rack.Example",
		LeaseSeconds: 600, DynamicRanges: []api.Range{{Start: "10.20.0.100", End: "10.20.0.199"}},
		ReservedRanges: []api.Range{{Start: "10.20.0.2", End: "10.20.0.9"}}}
	status, raw := ta.call(t, bob, "POST", "/api/v1/subnets", subnet, nil)
	wantError(t, status, raw, http.StatusForbidden, "forbidden")
	var sn api.Subnet
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/subnets", subnet, &sn); status != 201 || sn.Domain != "rack.example" {
		t.Fatalf("create subnet: %d %s", status, raw)
	}
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.20.0.0/16"}, nil)
	wantError(t, status, raw, http.StatusConflict, "conflict")
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.30.0.1/24"}, nil)
	wantError(t, status, raw, http.StatusBadRequest, "bad_request")

	// Created READY: the boot interface gets the first free static address,
	// after the gateway and outside the reserved and dynamic ranges.
	m := ta.addMachine(t, api.CreateMachine{Hostname: "web1", MACs: []string{"52:54:00:00:01:01", "52:54:00:00:01:02"}, State: "READY"})
	if len(m.IPs) != 1 || m.IPs[0].IP != "10.20.0.10" || m.IPs[0].Kind != "sticky" || m.IPs[0].MAC != "52:54:00:00:01:01" {
		t.Fatalf("sticky address of a READY machine: %+v", m.IPs)
	}
	// A NEW machine's hardware is unknown: no address yet.
	n := ta.addMachine(t, api.CreateMachine{Hostname: "new1", MACs: []string{"52:54:00:00:02:01"}})
	if len(n.IPs) != 0 {
		t.Fatalf("NEW machine got %+v", n.IPs)
	}

	// Reservations: never on a held address; the machine's MAC is not a
	// device's.
	status, raw = ta.call(t, bob, "POST", "/api/v1/ips/reservations", api.ReserveRequest{IP: "10.20.0.10", Purpose: "landscape"}, nil)
	wantError(t, status, raw, http.StatusConflict, "ip_in_use")
	status, raw = ta.call(t, bob, "POST", "/api/v1/ips/reservations", api.ReserveRequest{Subnet: "10.20.0.0/24", MAC: "52:54:00:00:01:02"}, nil)
	wantError(t, status, raw, http.StatusConflict, "conflict")
	var res api.Address
	if status, raw := ta.call(t, bob, "POST", "/api/v1/ips/reservations",
		api.ReserveRequest{IP: "10.20.0.5", MAC: "AA-BB-CC-00-00-01", Hostname: "switch1", Purpose: "switch management"}, &res); status != 201 ||
		res.Owner != "bob" || res.Kind != "reserved" || res.MAC != "aa:bb:cc:00:00:01" {
		t.Fatalf("reserve: %d %s", status, raw)
	}
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:01", IP: "10.20.0.5"}, nil)
	wantError(t, status, raw, http.StatusConflict, "ip_in_use")
	status, raw = ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:01", IP: "10.20.0.150"}, nil)
	wantError(t, status, raw, http.StatusBadRequest, "bad_request")

	// Override: the old address goes back and the history says so.
	var addr api.Address
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:01", IP: "10.20.0.50"}, &addr); status != 201 {
		t.Fatalf("override: %d %s", status, raw)
	}
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/web1/events?limit=1", nil, &evs)
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "replaces 10.20.0.10") {
		t.Fatalf("override event: %+v", evs)
	}
	// Alias on the second interface, and the first address is free again.
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:02", IP: "10.20.0.10", Alias: true}, nil); status != 201 {
		t.Fatalf("alias: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:02", IP: "10.20.0.11", Alias: true}, nil); status != 201 {
		t.Fatalf("second alias: %d %s", status, raw)
	}
	var got api.Machine
	ta.call(t, ta.admin, "GET", "/api/v1/machines/web1", nil, &got)
	if len(got.IPs) != 3 {
		t.Fatalf("web1 addresses: %+v", got.IPs)
	}

	// A lease as the DHCP server makes it shows in /leases and the pool use.
	if _, err := ta.Store().DHCPAck(t.Context(), store.LeaseRequest{MAC: "52:54:00:00:09:09", Link: netip.MustParseAddr("10.20.0.1"),
		IP: netip.MustParseAddr("10.20.0.120"), Hostname: "pxe-client"}); err != nil {
		t.Fatal(err)
	}
	var leases []api.Lease
	ta.call(t, bob, "GET", "/api/v1/leases", nil, &leases)
	if len(leases) != 1 || leases[0].IP != "10.20.0.120" || leases[0].Hostname != "pxe-client" {
		t.Fatalf("leases: %+v", leases)
	}
	var subnets []api.Subnet
	ta.call(t, bob, "GET", "/api/v1/subnets", nil, &subnets)
	if len(subnets) != 1 || subnets[0].DynamicSize != 100 || subnets[0].DynamicUsed != 1 {
		t.Fatalf("subnets: %+v", subnets)
	}
	var ips []api.Address
	ta.call(t, bob, "GET", "/api/v1/ips?kind=reserved", nil, &ips)
	if len(ips) != 1 || ips[0].Hostname != "switch1" {
		t.Fatalf("reserved: %+v", ips)
	}
	// Only the owner or an admin releases a reservation.
	other := ta.addUser(t, "eve", false)
	status, raw = ta.call(t, other, "DELETE", "/api/v1/ips/reservations/10.20.0.5", nil, nil)
	wantError(t, status, raw, http.StatusForbidden, "forbidden")
	if status, raw := ta.call(t, bob, "DELETE", "/api/v1/ips/reservations/10.20.0.5", nil, nil); status != 200 {
		t.Fatalf("unreserve: %d %s", status, raw)
	}
	if status, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/machines/web1/ips/10.20.0.11", nil, nil); status != 200 {
		t.Fatalf("remove alias: %d %s", status, raw)
	}
	text := scrape(t, ta)
	for _, want := range []string{`rackd_ipam_active_leases 1`, `rackd_ipam_pool_addresses{subnet="10.20.0.0/24"} 100`,
		`rackd_ipam_pool_used_addresses{subnet="10.20.0.0/24"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// Asking for "an address" of an interface is answered with the one it has
// (200), and only the first time with a new one (201).
func TestAssignIPAgain(t *testing.T) {
	ta := startAgent(t)
	if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/subnets", api.Subnet{CIDR: "10.20.0.0/24", Gateway: "10.20.0.1"}, nil); status != 201 {
		t.Fatalf("create subnet: %d %s", status, raw)
	}
	m := ta.addMachine(t, api.CreateMachine{Hostname: "web1", MACs: []string{"52:54:00:00:01:01", "52:54:00:00:01:02"}, State: "READY"})
	if len(m.IPs) != 1 || m.IPs[0].IP != "10.20.0.2" {
		t.Fatalf("sticky address of a READY machine: %+v", m.IPs)
	}
	for i, tt := range []struct {
		mac    string
		status int
		ip     string
	}{
		{"52:54:00:00:01:01", 200, "10.20.0.2"}, // it has one
		{"52:54:00:00:01:02", 201, "10.20.0.3"}, // it has none
		{"52:54:00:00:01:02", 200, "10.20.0.3"}, // it has that one now
	} {
		var got api.Address
		if status, raw := ta.call(t, ta.admin, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: tt.mac}, &got); status != tt.status || got.IP != tt.ip {
			t.Fatalf("request %d for %s: %d %s; want %d with %s", i, tt.mac, status, raw, tt.status, tt.ip)
		}
	}
	var evs []api.Event
	ta.call(t, ta.admin, "GET", "/api/v1/machines/web1/events", nil, &evs)
	assigns := 0
	for _, e := range evs {
		if e.Action == "ip-assign" {
			assigns++
		}
	}
	if assigns != 2 {
		t.Errorf("%d ip-assign events, want 2 (one per interface): %+v", assigns, evs)
	}
	bob := ta.addUser(t, "bob", false)
	status, raw := ta.call(t, bob, "POST", "/api/v1/machines/web1/ips", api.AssignIP{MAC: "52:54:00:00:01:01"}, nil)
	wantError(t, status, raw, http.StatusForbidden, "forbidden")
}
