package maasapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rackd/store"
)

// multipartFile is a files/ upload as python-libmaas and gomaasapi send it.
func multipartFile(t *testing.T, fields map[string]string, part string, content []byte) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if part != "" {
		fw, err := w.CreateFormFile(part, part)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(content)
	}
	for k, v := range fields {
		w.WriteField(k, v)
	}
	w.Close()
	return b.Bytes(), w.FormDataContentType()
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func (ts *testServer) subnet(t *testing.T, sn store.Subnet) store.Subnet {
	t.Helper()
	sn, err := ts.st.CreateSubnet(context.Background(), store.System, sn)
	if err != nil {
		t.Fatal(err)
	}
	return sn
}

func TestNetworkModel(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "alice", false)
	auth := oauthHeader(key)
	a := netip.MustParseAddr
	sn := ts.subnet(t, store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/24"), Gateway: a("10.0.0.1"),
		DNSServers: []netip.Addr{a("10.0.0.2")}, Domain: "rack.example", LeaseSeconds: 600,
		DynamicRanges: []store.Range{{Start: a("10.0.0.100"), End: a("10.0.0.199")}}})
	ts.subnet(t, store.Subnet{CIDR: netip.MustParsePrefix("2001:db8::/64"), LeaseSeconds: 600})
	get := func(path string, want int) string {
		t.Helper()
		status, body, _ := ts.do(t, auth, "GET", path, nil, "")
		if status != want {
			t.Fatalf("GET %s: %d %q, want %d", path, status, body, want)
		}
		return body
	}
	subnets := decode[[]subnetJSON](t, get("subnets/", 200))
	if len(subnets) != 2 || subnets[0].CIDR != "10.0.0.0/24" || subnets[0].GatewayIP == nil || *subnets[0].GatewayIP != "10.0.0.1" ||
		subnets[0].Space != "undefined" || subnets[0].VLAN.ID != vlanID || subnets[0].VLAN.VID != 0 || subnets[0].VLAN.Fabric != "fabric-0" ||
		strings.Join(subnets[0].DNSServers, ",") != "10.0.0.2" || subnets[1].GatewayIP != nil || subnets[1].DNSServers == nil {
		t.Fatalf("subnets: %+v", subnets)
	}
	id := strconv.Itoa(subnets[0].ID)
	if subnets[0].ID != subnetID(sn) || subnets[0].ResourceURI != Prefix+"subnets/"+id+"/" {
		t.Fatalf("subnet id %d, uri %s", subnets[0].ID, subnets[0].ResourceURI)
	}
	// A subnet by id, CIDR or specifier.
	for _, spec := range []string{id, "id:" + id, "cidr:10.0.0.0%2F24", "name:10.0.0.0%2F24", "10.0.0.0%2F24"} {
		if got := decode[subnetJSON](t, get("subnets/"+spec+"/", 200)); got.ID != subnets[0].ID {
			t.Errorf("subnets/%s/: %+v", spec, got)
		}
	}
	get("subnets/12345/", 404)
	get("subnets/cidr:10.9.0.0%2F24/", 404)
	fabrics := decode[[]fabricJSON](t, get("fabrics/", 200))
	if len(fabrics) != 1 || fabrics[0].ID != 0 || len(fabrics[0].VLANs) != 1 || fabrics[0].VLANs[0].ID != vlanID {
		t.Fatalf("fabrics: %+v", fabrics)
	}
	get("fabrics/0/", 200)
	get("fabrics/fabric-0/", 200)
	get("fabrics/1/", 404)
	get("fabrics/0/vlans/", 200)
	get("fabrics/0/vlans/0/", 200)
	get("fabrics/0/vlans/7/", 404)
	get("vlans/5001/", 200)
	get("vlans/5002/", 404)
	spaces := decode[[]spaceJSON](t, get("spaces/", 200))
	if len(spaces) != 1 || spaces[0].ID != -1 || spaces[0].Name != "undefined" || len(spaces[0].Subnets) != 2 {
		t.Fatalf("spaces: %+v", spaces)
	}
	get("spaces/-1/", 200)
	get("spaces/0/", 404)
	ranges := decode[[]ipRangeJSON](t, get("ipranges/", 200))
	if len(ranges) != 1 || ranges[0].Type != "dynamic" || ranges[0].StartIP != "10.0.0.100" || ranges[0].Subnet.ID != subnets[0].ID {
		t.Fatalf("ipranges: %+v", ranges)
	}
	get("ipranges/"+strconv.Itoa(ranges[0].ID)+"/", 200)
	get("ipranges/1/", 404)
	domains := decode[[]domainJSON](t, get("domains/", 200))
	if len(domains) != 1 || domains[0].Name != "rack.example" || !domains[0].IsDefault {
		t.Fatalf("domains: %+v", domains)
	}
	get("domains/rack.example/", 200)
	get("domains/"+strconv.Itoa(domains[0].ID)+"/", 200)
	get("domains/other/", 404)

	stats := decode[map[string]any](t, get("subnets/"+id+"/?op=statistics", 200))
	// 254 usable: the gateway, the DNS server and 100 dynamic addresses
	// are in use.
	if stats["total_addresses"] != 254.0 || stats["num_unavailable"] != 102.0 || stats["num_available"] != 152.0 || stats["ip_version"] != 4.0 {
		t.Fatalf("statistics: %v", stats)
	}
	reserved := decode[[]rangeJSON](t, get("subnets/"+id+"/?op=reserved_ip_ranges", 200))
	if len(reserved) != 3 || reserved[0].Purpose[0] != "gateway-ip" || reserved[2].Purpose[0] != "dynamic" {
		t.Fatalf("reserved ranges: %+v", reserved)
	}
	get("subnets/"+id+"/?op=unreserved_ip_ranges", 200)
	get("subnets/"+id+"/?op=ip_addresses", 200)
	get("subnets/"+id+"/?op=frobnicate", 501)
}

func TestIPAddresses(t *testing.T) {
	ts := newTestServer(t)
	aliceKey, _ := ts.key(t, "alice", false)
	bobKey, _ := ts.key(t, "bob", false)
	adminKey, _ := ts.key(t, "root", true)
	alice, bob, admin := oauthHeader(aliceKey), oauthHeader(bobKey), oauthHeader(adminKey)
	a := netip.MustParseAddr
	ts.subnet(t, store.Subnet{CIDR: netip.MustParsePrefix("10.0.0.0/24"), Domain: "rack.example", LeaseSeconds: 600,
		DynamicRanges: []store.Range{{Start: a("10.0.0.100"), End: a("10.0.0.199")}}})
	post := func(auth, op string, form url.Values, want int) string {
		t.Helper()
		status, body, _ := ts.do(t, auth, "POST", "ipaddresses/?op="+op, form, "")
		if status != want {
			t.Fatalf("%s %v: %d %q, want %d", op, form, status, body, want)
		}
		return body
	}
	r1 := decode[ipAddressJSON](t, post(alice, "reserve", url.Values{"subnet": {"10.0.0.0/24"}}, 200))
	if r1.IP == "" || r1.AllocType != 4 || r1.AllocTypeName != "User reserved" || r1.Owner == nil || r1.Owner.Username != "alice" || r1.Subnet.CIDR != "10.0.0.0/24" {
		t.Fatalf("reserved %+v", r1)
	}
	r2 := decode[ipAddressJSON](t, post(alice, "reserve", url.Values{"ip": {"10.0.0.50"}, "hostname": {"sw1.rack.example"}, "mac": {"52:54:00:00:00:99"}}, 200))
	if r2.IP != "10.0.0.50" {
		t.Fatalf("reserved %+v", r2)
	}
	// The store's reservation: DHCP and DNS know it.
	if got, err := ts.st.DNSForward("sw1.rack.example"); err != nil || len(got) != 1 || got[0] != a("10.0.0.50") {
		t.Fatalf("DNS of the reservation: %v %v", got, err)
	}
	// A reservation is rackd's own: DHCP never hands it out, even from
	// its dynamic range, and asking for it is not enough.
	post(alice, "reserve", url.Values{"ip": {"10.0.0.100"}}, 200)
	for i := range 3 {
		mac := fmt.Sprintf("52:54:00:00:10:%02x", i)
		g, err := ts.st.DHCPOffer(context.Background(), store.LeaseRequest{MAC: mac, Link: a("10.0.0.1"), IP: a("10.0.0.100")})
		if err != nil || !g.Address.IP.IsValid() || g.Address.IP == a("10.0.0.100") {
			t.Fatalf("DHCP offer to %s: %v %v", mac, g.Address.IP, err)
		}
	}
	post(alice, "release", url.Values{"ip": {"10.0.0.100"}}, 200)
	post(bob, "reserve", url.Values{"ip": {"10.0.0.50"}}, 409)
	post(bob, "reserve", url.Values{}, 400)
	post(bob, "reserve", url.Values{"ip": {"192.0.2.1"}}, 400)
	post(bob, "reserve", url.Values{"ip": {"bogus"}}, 400)
	post(bob, "reserve", url.Values{"subnet": {"10.9.0.0/24"}}, 400)
	post(bob, "reserve", url.Values{"ip": {"10.0.0.51"}, "hostname": {"x.other.example"}}, 400)

	list := func(auth, query string) []ipAddressJSON {
		t.Helper()
		status, body, _ := ts.do(t, auth, "GET", "ipaddresses/"+query, nil, "")
		if status != 200 {
			t.Fatalf("list %s: %d %q", query, status, body)
		}
		return decode[[]ipAddressJSON](t, body)
	}
	if l := list(alice, ""); len(l) != 2 {
		t.Fatalf("alice's: %+v", l)
	}
	if l := list(bob, ""); len(l) != 0 {
		t.Fatalf("bob sees %+v", l)
	}
	if status, _, _ := ts.do(t, bob, "GET", "ipaddresses/?all=true", nil, ""); status != 403 {
		t.Fatalf("bob lists all: %d", status)
	}
	if l := list(admin, "?owner=alice"); len(l) != 2 {
		t.Fatalf("admin's view of alice's: %+v", l)
	}
	// Another user's key cannot release mine (MAAS's 400, never a 403
	// that Juju would take for a bad key), nor can an admin's without
	// force.
	post(bob, "release", url.Values{"ip": {r1.IP}}, 400)
	post(admin, "release", url.Values{"ip": {r1.IP}}, 400)
	post(bob, "release", url.Values{"ip": {r1.IP}, "force": {"true"}}, 403)
	post(alice, "release", url.Values{}, 400)
	post(alice, "release", url.Values{"ip": {r1.IP}}, 200)
	post(alice, "release", url.Values{"ip": {r1.IP}}, 400)
	post(admin, "release", url.Values{"ip": {"10.0.0.50"}, "force": {"true"}}, 200)
	if l := list(alice, ""); len(l) != 0 {
		t.Fatalf("alice's after release: %+v", l)
	}
}

func TestFiles(t *testing.T) {
	ts := newTestServer(t)
	aliceKey, _ := ts.key(t, "alice", false)
	bobKey, _ := ts.key(t, "bob", false)
	alice, bob := oauthHeader(aliceKey), oauthHeader(bobKey)
	add := func(auth, name string, content []byte, want int) {
		t.Helper()
		body, ctype := multipartFile(t, map[string]string{"filename": name}, "file", content)
		if status, resp, _ := ts.do(t, auth, "POST", "files/", body, ctype); status != want {
			t.Fatalf("add %s: %d %q, want %d", name, status, resp, want)
		}
	}
	state := []byte("bootstrap state\x00\xff")
	add(alice, "env-provider-state", state, 200)
	add(alice, "env-other", []byte("x"), 200)
	add(alice, "zzz", nil, 200)
	add(bob, "env-provider-state", []byte("bob's"), 200)

	status, body, _ := ts.do(t, alice, "GET", "files/?prefix=env-", nil, "")
	files := decode[[]fileJSON](t, body)
	if status != 200 || len(files) != 2 || files[0].Filename != "env-other" || files[1].ResourceURI != Prefix+"files/env-provider-state/" ||
		!strings.HasPrefix(files[1].AnonResourceURI, Prefix+"files/?") || files[1].Content != "" {
		t.Fatalf("list: %d %+v", status, files)
	}
	status, body, _ = ts.do(t, alice, "GET", "files/env-provider-state/", nil, "")
	if f := decode[fileJSON](t, body); status != 200 || f.Content != base64.StdEncoding.EncodeToString(state) {
		t.Fatalf("read: %d %+v", status, f)
	}
	if status, body, _ = ts.do(t, alice, "GET", "files/?op=get&filename=env-provider-state", nil, ""); status != 200 || body != string(state) {
		t.Fatalf("op=get: %d %q", status, body)
	}
	anon, _ := url.Parse(files[1].AnonResourceURI)
	if status, body, _ = ts.do(t, alice, "GET", "files/?"+anon.RawQuery, nil, ""); status != 200 || body != string(state) {
		t.Fatalf("op=get_by_key: %d %q", status, body)
	}
	// Anonymous: refused (only version/ and describe/ answer without a key).
	if status, _, _ = ts.do(t, "", "GET", "files/?"+anon.RawQuery, nil, ""); status != 401 {
		t.Fatalf("anonymous get_by_key: %d", status)
	}
	// Bob's key reads his own file of that name, never alice's.
	if status, body, _ = ts.do(t, bob, "GET", "files/?op=get&filename=env-provider-state", nil, ""); status != 200 || body != "bob's" {
		t.Fatalf("bob's op=get: %d %q", status, body)
	}
	for _, p := range []string{"files/env-other/", "files/?op=get&filename=env-other", "files/?" + anon.RawQuery} {
		if status, _, _ := ts.do(t, bob, "GET", p, nil, ""); status != 404 {
			t.Errorf("bob GET %s: %d, want 404", p, status)
		}
	}
	if status, _, _ := ts.do(t, bob, "DELETE", "files/env-other/", nil, ""); status != 404 {
		t.Errorf("bob deletes alice's: %d", status)
	}
	// Bad uploads.
	body2, ctype := multipartFile(t, map[string]string{"filename": "f"}, "", nil)
	if status, _, _ := ts.do(t, alice, "POST", "files/", body2, ctype); status != 400 {
		t.Errorf("no file: %d", status)
	}
	body2, ctype = multipartFile(t, nil, "file", []byte("x"))
	if status, _, _ := ts.do(t, alice, "POST", "files/", body2, ctype); status != 400 {
		t.Errorf("no filename: %d", status)
	}
	body2, ctype = multipartFile(t, map[string]string{"filename": "big"}, "file", make([]byte, store.MaxUserFileSize+1))
	if status, _, _ := ts.do(t, alice, "POST", "files/", body2, ctype); status != 413 {
		t.Errorf("too big: %d", status)
	}
	// Delete both ways.
	if status, _, _ := ts.do(t, alice, "DELETE", "files/env-other/", nil, ""); status != 200 {
		t.Errorf("delete: %d", status)
	}
	if status, _, _ := ts.do(t, alice, "DELETE", "files/?filename=zzz", nil, ""); status != 200 {
		t.Errorf("delete by query: %d", status)
	}
	status, body, _ = ts.do(t, alice, "GET", "files/", nil, "")
	if files := decode[[]fileJSON](t, body); len(files) != 1 {
		t.Fatalf("after deletes: %+v", files)
	}
}

func TestNotServed(t *testing.T) {
	ts := newTestServer(t)
	key, _ := ts.key(t, "root", true)
	for _, c := range []struct{ method, path, want string }{
		{"POST", "zones/", "create"},
		{"DELETE", "zones/default/", "delete"},
		{"POST", "fabrics/", "fabric"},
		{"PUT", "subnets/1/", "update"},
		{"POST", "boot-resources/?op=import", "op=import"},
		{"POST", "tags/ssd/?op=update_nodes&definition=//node", "XPath"},
	} {
		status, body, _ := ts.do(t, oauthHeader(key), c.method, c.path, url.Values{"name": {"x"}}, "")
		if status != 501 || !strings.Contains(body, c.want) || !strings.Contains(body, "rackd") {
			t.Errorf("%s %s: %d %q, want 501 saying %q", c.method, c.path, status, body, c.want)
		}
	}
}

func TestTagsAndZones(t *testing.T) {
	ts := newTestServer(t)
	aliceKey, _ := ts.key(t, "alice", false)
	adminKey, _ := ts.key(t, "root", true)
	alice, admin := oauthHeader(aliceKey), oauthHeader(adminKey)
	ctx := context.Background()
	m1, err := ts.st.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}, Zone: "rack2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.st.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "n2", MACs: []string{"52:54:00:00:00:02"}, Tags: []string{"gpu"}, State: store.StateReady}); err != nil {
		t.Fatal(err)
	}
	status, body, _ := ts.do(t, alice, "GET", "zones/", nil, "")
	zones := decode[[]zoneJSON](t, body)
	if status != 200 || len(zones) != 2 || zones[0].Name != "default" || zones[0].ID != 1 || zones[1].Name != "rack2" {
		t.Fatalf("zones: %d %+v", status, zones)
	}
	if status, _, _ := ts.do(t, alice, "GET", "zones/rack2/", nil, ""); status != 200 {
		t.Errorf("zone rack2: %d", status)
	}
	if status, _, _ := ts.do(t, alice, "GET", "zones/rack9/", nil, ""); status != 404 {
		t.Errorf("zone rack9: %d", status)
	}
	if status, body, _ := ts.do(t, alice, "GET", "resourcepools/", nil, ""); status != 200 || !strings.Contains(body, `"name":"default"`) {
		t.Errorf("pools: %d %q", status, body)
	}
	// update_nodes is an admin's, as every change of a machine.
	if status, _, _ := ts.do(t, alice, "POST", "tags/ssd/?op=update_nodes", url.Values{"add": {m1.ID}}, ""); status != 403 {
		t.Errorf("alice tags: %d", status)
	}
	status, body, _ = ts.do(t, admin, "POST", "tags/ssd/?op=update_nodes", url.Values{"add": {m1.ID, "n2"}}, "")
	if status != 200 || body != `{"added":2,"removed":0}` {
		t.Fatalf("update_nodes: %d %q", status, body)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/", nil, "")
	if tags := decode[[]tagJSON](t, body); len(tags) != 2 || tags[0].Name != "gpu" || tags[1].Name != "ssd" {
		t.Fatalf("tags: %+v", tags)
	}
	if status, _, _ := ts.do(t, alice, "GET", "tags/ssd/", nil, ""); status != 200 {
		t.Errorf("tag ssd: %d", status)
	}
	if status, _, _ := ts.do(t, alice, "GET", "tags/none/", nil, ""); status != 404 {
		t.Errorf("tag none: %d", status)
	}
	if status, _, _ := ts.do(t, admin, "POST", "tags/ssd/?op=update_nodes", url.Values{"add": {"nosuch"}}, ""); status != 404 {
		t.Errorf("unknown machine: %d", status)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/gpu/?op=machines", nil, "")
	if ms := decode[[]map[string]any](t, body); status != 200 || len(ms) != 1 || ms[0]["hostname"] != "n2" {
		t.Fatalf("tags/gpu/?op=machines: %d %v", status, ms)
	}
	// Another user's held machine is not alice's to see.
	if _, err := ts.st.Allocate(ctx, store.Actor{Name: "bob"}, store.AllocateRequest{Name: "n2", AgentName: "b"}); err != nil {
		t.Fatal(err)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/gpu/?op=machines", nil, "")
	if ms := decode[[]map[string]any](t, body); status != 200 || len(ms) != 0 {
		t.Fatalf("tags/gpu/?op=machines with n2 bob's: %d %v", status, ms)
	}
	if status, _, _ := ts.do(t, admin, "DELETE", "tags/ssd/", nil, ""); status != 200 {
		t.Errorf("delete tag: %d", status)
	}
	if status, _, _ := ts.do(t, alice, "GET", "tags/ssd/", nil, ""); status != 404 {
		t.Errorf("deleted tag: %d", status)
	}
}

// TestTagDefinitions: a tag defined before any machine carries it (as
// Terraform's maas_tag and Ansible's tag module make one), renamed,
// commented and deleted; what rackd cannot do is refused, never ignored.
func TestTagDefinitions(t *testing.T) {
	ts := newTestServer(t)
	aliceKey, _ := ts.key(t, "alice", false)
	adminKey, _ := ts.key(t, "root", true)
	alice, admin := oauthHeader(aliceKey), oauthHeader(adminKey)
	ctx := context.Background()
	m1, err := ts.st.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "n1", MACs: []string{"52:54:00:00:00:01"}})
	if err != nil {
		t.Fatal(err)
	}
	status, body, _ := ts.do(t, admin, "POST", "tags/", url.Values{"name": {"fast"}, "comment": {"NVMe boxes"}}, "")
	if tg := decode[tagJSON](t, body); status != 200 || tg.Name != "fast" || tg.Comment != "NVMe boxes" || tg.ResourceURI != "/MAAS/api/2.0/tags/fast/" {
		t.Fatalf("create: %d %q", status, body)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/fast/", nil, "")
	if tg := decode[tagJSON](t, body); status != 200 || tg.Comment != "NVMe boxes" {
		t.Fatalf("read a tag no machine carries: %d %q", status, body)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/fast/?op=machines", nil, "")
	if status != 200 || body != "[]" {
		t.Fatalf("machines of a tag none carries: %d %q", status, body)
	}
	for _, c := range []struct {
		who, method, path string
		form              url.Values
		status            int
		says              string
	}{
		{alice, "POST", "tags/", url.Values{"name": {"mine"}}, 403, "admin"},
		{admin, "POST", "tags/", url.Values{"name": {"fast"}}, 409, "defined already"},
		{admin, "POST", "tags/", url.Values{"comment": {"no name"}}, 400, "name"},
		{admin, "POST", "tags/", url.Values{"name": {"bad tag"}}, 400, "invalid tag"},
		{admin, "POST", "tags/", url.Values{"name": {"x"}, "definition": {"//node[@id='cpu']"}}, 400, "XPath"},
		{admin, "POST", "tags/", url.Values{"name": {"x"}, "kernel_opts": {"console=ttyS0"}}, 400, "kernel options"},
		{admin, "PUT", "tags/fast/", url.Values{"kernel_opts": {"quiet"}}, 400, "kernel_opts"},
		{alice, "PUT", "tags/fast/", url.Values{"comment": {"x"}}, 403, "admin"},
		{admin, "PUT", "tags/none/", url.Values{"comment": {"x"}}, 404, "none"},
		{alice, "DELETE", "tags/fast/", nil, 403, "admin"},
	} {
		status, body, _ := ts.do(t, c.who, c.method, c.path, c.form, "")
		if status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("%s %s %v: %d %q, want %d saying %q", c.method, c.path, c.form, status, body, c.status, c.says)
		}
	}
	if _, _, err := ts.st.TagMachines(ctx, store.Actor{Name: "root", Admin: true}, "fast", []string{m1.ID}, nil, ""); err != nil {
		t.Fatal(err)
	}
	// Terraform's update sends the name each time; a new one renames the
	// tag on its machines too.
	status, body, _ = ts.do(t, admin, "PUT", "tags/fast/", url.Values{"name": {"nvme"}, "comment": {"renamed"}}, "")
	if tg := decode[tagJSON](t, body); status != 200 || tg.Name != "nvme" || tg.Comment != "renamed" {
		t.Fatalf("rename: %d %q", status, body)
	}
	if m, err := ts.st.Machine(m1.ID); err != nil || !slices.Equal(m.Tags, []string{"nvme"}) {
		t.Fatalf("n1's tags after the rename: %v %v", m.Tags, err)
	}
	if status, _, _ := ts.do(t, admin, "DELETE", "tags/nvme/", nil, ""); status != 200 {
		t.Fatalf("delete: %d", status)
	}
	if m, err := ts.st.Machine(m1.ID); err != nil || len(m.Tags) != 0 {
		t.Fatalf("n1's tags after the delete: %v %v", m.Tags, err)
	}
	status, body, _ = ts.do(t, alice, "GET", "tags/", nil, "")
	if status != 200 || body != "[]" {
		t.Fatalf("tags at the end: %d %q", status, body)
	}
}

// TestWriteJSONLongList: a long list is streamed, element by element, into
// the same JSON as one encoded whole; one that cannot be encoded cuts the
// connection instead of ending in a truncated list.
func TestWriteJSONLongList(t *testing.T) {
	type item struct {
		ID   int               `json:"id"`
		Name string            `json:"name"`
		Tags []string          `json:"tags"`
		M    map[string]string `json:"m"`
	}
	for _, n := range []int{0, 1, streamAbove, streamAbove + 1, 1000} {
		list := make([]item, n)
		for i := range list {
			list[i] = item{ID: i, Name: fmt.Sprintf("<m%d & \"x\">", i), Tags: []string{"a", "\u2028"}, M: map[string]string{"k": "v"}}
		}
		rec := httptest.NewRecorder()
		writeJSON(rec, 200, list)
		want, _ := json.Marshal(list)
		var got, exp any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%d items: %v in %.200q", n, err, rec.Body.String())
		}
		json.Unmarshal(want, &exp)
		if !reflect.DeepEqual(got, exp) || rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%d items: %d %q, want %s", n, rec.Code, rec.Body.String(), want)
		}
	}
	bad := make([]float64, 2*streamAbove)
	bad[streamAbove+5] = math.NaN()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, bad) }))
	defer hs.Close()
	resp, err := http.Get(hs.URL)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a list that cannot be encoded was answered in full")
	}
}
