package main

// The phase credential on a real network: rackd serves DHCP, TFTP and HTTP
// on a bridge in a server namespace; host A, the machine, gets its lease
// from rackd with busybox udhcpc; host B, another host on the same bridge
// that knows A's MAC, fetches A's boot configs with tftp-hpa and curl and
// tries to claim A's credential with curl. Root only (network namespaces).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/netnstest"
)

// credHost is a host on the lab's bridge.
type credHost struct {
	ns     *netnstest.NS
	ifname string
}

// claim posts a credential claim with curl from h and returns the status
// and the body.
func (h credHost) claim(t *testing.T, curl, machine, mac string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(enlist.CredentialRequest{Machine: machine, MAC: mac})
	out := h.ns.MustExec(curl, "-sS", "--max-time", "20", "-w", "\n%{http_code}", "-H", "Content-Type: application/json",
		"--data-binary", string(body), "http://"+e2eServer.String()+":5240"+enlist.PathCredential)
	i := strings.LastIndexByte(out, '\n')
	var status int
	if _, err := fmt.Sscan(out[i+1:], &status); err != nil {
		t.Fatalf("curl said %q", out)
	}
	return status, out[:i]
}

// TestE2ECredentialClaim: the boot configs any host can fetch for a MAC
// name the machine and carry no credential; a host that knows the MAC but
// does not hold its lease is refused the credential, and the refusal is in
// the machine's events; the lease's holder gets it once, and its second
// claim is refused (409) and is an event naming both addresses.
func TestE2ECredentialClaim(t *testing.T) {
	netnstest.Require(t)
	curl, tftp := netnstest.Tool(t, "curl"), netnstest.Tool(t, "tftp")
	netnstest.Tool(t, "udhcpc")

	srv := netnstest.New(t)
	br := srv.Bridge()
	srv.AddAddr(br, netip.PrefixFrom(e2eServer, 24))
	dir := t.TempDir()
	state, config := filepath.Join(dir, "state"), filepath.Join(dir, "rackd.toml")
	cfg := fmt.Sprintf("listen = \"0.0.0.0:5240\"\n[dhcp]\ninterfaces = [%q]\nprobe_timeout = \"200ms\"\n[tftp]\nlisten = \"0.0.0.0:69\"\n", br)
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := srv.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	t.Cleanup(client.CloseIdleConnections)
	d := startDaemonIn(t, srv.Name, state, "--config", config, "--listen", "0.0.0.0:5240")
	d.url = "http://127.0.0.1:5240"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rackd log:\n%s", d.stderr.String())
		}
	})
	token := adminToken(t, state)
	call := func(want int, method, path string, body, out any) {
		t.Helper()
		status, raw, err := d.api(client, token, method, path, body, out)
		if err != nil || status != want {
			t.Fatalf("%s %s: %d %s (%v), want %d", method, path, status, raw, err, want)
		}
	}
	// An enlistment image: it is the commissioning environment too.
	(&bootLab{srv: srv, state: state, client: client}).importEnlist(t, d)
	call(http.StatusCreated, "POST", "/api/v1/subnets", e2eSubnet(), nil)

	hosts := make([]credHost, 2)
	for i := range hosts {
		ns := netnstest.New(t)
		port, ifname := netnstest.Veth(t, srv, ns)
		srv.Attach(port, br)
		hosts[i] = credHost{ns: ns, ifname: ifname}
	}
	a, b := hosts[0], hosts[1]
	// B has an address of its own on the rack network, from no DHCP.
	const addrB = "10.77.0.50"
	b.ns.AddAddr(b.ifname, netip.MustParsePrefix(addrB+"/24"))
	mac := a.ns.MAC(a.ifname).String()

	var m api.Machine
	call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "node-a", MACs: []string{mac},
		Power: &api.PowerParams{Driver: "manual"}}, &m)
	call(http.StatusOK, "POST", "/api/v1/machines/node-a/commission", api.ActionRequest{}, nil)
	ipA := checkOptions(t, udhcpcOnce(t, a.ns, a.ifname)).String()

	// B reads A's configs, as anyone who names the MAC can.
	dashed := strings.ReplaceAll(mac, ":", "-")
	configs := map[string]string{}
	for _, name := range []string{"pxelinux.cfg/01-" + dashed, "grub/grub.cfg-" + mac} {
		out := filepath.Join(t.TempDir(), "got")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		// tftp-hpa reads a colon in a bare name as a host separator:
		// host:name (see the tftp package's peer tests).
		msg, err := b.ns.Exec(ctx, tftp, "-m", "binary", e2eServer.String(), "69", "-c", "get", e2eServer.String()+":"+name, out)
		cancel()
		got, rerr := os.ReadFile(out)
		if err != nil || rerr != nil || len(got) == 0 {
			t.Fatalf("tftp get %s: %v, %v; it said: %s", name, err, rerr, msg)
		}
		configs["tftp "+name] = string(got)
	}
	configs["http ipxe"] = b.ns.MustExec(curl, "-sSf", "--max-time", "20", "http://"+e2eServer.String()+":5240/boot/ipxe?mac="+mac)
	for what, c := range configs {
		if !strings.Contains(c, "rackd.mode=commission") || !strings.Contains(c, "rackd.machine="+m.ID) || strings.Contains(c, "rackd.token") {
			t.Errorf("%s: want the commissioning config of %s without a credential:\n%s", what, m.ID, c)
		}
	}

	// B claims A's credential: refused, and the machine's events say so.
	status, body := b.claim(t, curl, m.ID, mac)
	if status != http.StatusForbidden || strings.Contains(body, ipA) {
		t.Fatalf("B's claim: %d %s", status, body)
	}
	var evs []api.Event
	call(http.StatusOK, "GET", "/api/v1/machines/node-a/events", nil, &evs)
	if e := evs[len(evs)-1]; e.Action != "credential-refused" || !strings.Contains(e.Reason, "from "+addrB) ||
		!strings.Contains(e.Reason, "dynamic "+ipA) {
		t.Fatalf("after B's claim, last event %+v", e)
	}

	// A, the lease's holder, claims once.
	status, body = a.claim(t, curl, m.ID, mac)
	var cred enlist.Credential
	if status != http.StatusOK || json.Unmarshal([]byte(body), &cred) != nil || cred.Token == "" || cred.Phase != "commission" {
		t.Fatalf("A's claim: %d %s", status, body)
	}
	for what, c := range configs {
		if strings.Contains(c, cred.Token) {
			t.Errorf("%s carried the credential:\n%s", what, c)
		}
	}
	status, body = a.claim(t, curl, m.ID, mac)
	if status != http.StatusConflict {
		t.Fatalf("A's second claim: %d %s", status, body)
	}
	call(http.StatusOK, "GET", "/api/v1/machines/node-a/events", nil, &evs)
	e := evs[len(evs)-1]
	if e.Action != "credential-refused" || !strings.HasPrefix(e.Reason, "commission credential already claimed by "+ipA+" at ") ||
		!strings.HasSuffix(e.Reason, "; refused "+ipA) {
		t.Fatalf("after A's second claim, last event %+v", e)
	}
	claimed := false
	for _, e := range evs {
		claimed = claimed || e.Action == "credential-claimed" && strings.Contains(e.Reason, ipA)
	}
	if !claimed {
		t.Fatalf("no credential-claimed event: %+v", evs)
	}
	// B, not the lease's holder, is not told that it was claimed.
	if status, body = b.claim(t, curl, m.ID, mac); status != http.StatusForbidden {
		t.Fatalf("B's second claim: %d %s", status, body)
	}
}
