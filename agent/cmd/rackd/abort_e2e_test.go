package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/ipmisim"
	"rackd/internal/netnstest"
)

// TestE2EAbort stops a commissioning (an admin) and a deployment (its
// owner) with the real binary's CLI, against a real BMC (ipmi_sim): the
// power queue powers the BMC off, the phase's credential (claimed with curl,
// as an environment would) is refused afterwards for a report (401), a seed
// (401) and a new claim (403), and an abort of a machine in no phase exits
// 1 with the 409 naming its state.
func TestE2EAbort(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim, ipmitool from scripts/test-deps.sh); run as root or via make test")
	}
	curl := netnstest.Tool(t, "curl")
	sim := ipmisim.Start(t, ipmisim.Options{})
	dir := t.TempDir()
	state, config := filepath.Join(dir, "state"), filepath.Join(dir, "rackd.toml")
	// The environments are played by curl on loopback, which holds no DHCP
	// binding: the site rule for environments behind NAT lets it claim.
	if err := os.WriteFile(config, []byte("[metadata]\ncredential_binding = \"none\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, "--config", config)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rackd log:\n%s\nipmi_sim hook log:\n%s", d.stderr.String(), sim.HookLog())
		}
	})
	admin := adminToken(t, state)
	call := func(token string, want int, method, path string, body, out any) {
		t.Helper()
		status, raw, err := d.api(http.DefaultClient, token, method, path, body, out)
		if err != nil || status != want {
			t.Fatalf("%s %s: %d %s (%v), want %d", method, path, status, raw, err, want)
		}
	}
	// curlTo sends what an environment sends, and returns the status.
	curlTo := func(token, method, path string, body any) (int, string) {
		t.Helper()
		args := []string{"-sS", "--max-time", "20", "-w", "\n%{http_code}", "-X", method}
		if token != "" {
			args = append(args, "-H", "Authorization: Bearer "+token)
		}
		if body != nil {
			b, _ := json.Marshal(body)
			args = append(args, "-H", "Content-Type: application/json", "--data-binary", string(b))
		}
		out, err := exec.Command(curl, append(args, d.url+path)...).Output()
		s := string(out)
		i := strings.LastIndexByte(s, '\n')
		var status int
		if _, serr := fmt.Sscan(s[i+1:], &status); err != nil || serr != nil {
			t.Fatalf("curl %s %s: %v, said %q", method, path, err, s)
		}
		return status, s[:i]
	}
	const mac = "52:54:00:ab:07:01"
	claim := func(m api.Machine) (int, enlist.Credential) {
		t.Helper()
		status, body := curlTo("", "POST", enlist.PathCredential, enlist.CredentialRequest{Machine: m.ID, MAC: mac})
		var c enlist.Credential
		if status == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &c); err != nil {
				t.Fatalf("claim: %v: %s", err, body)
			}
		}
		return status, c
	}
	simState := func() (bool, string) {
		on, err := sim.Power()
		if err != nil {
			t.Fatalf("ipmi_sim power: %v", err)
		}
		boot, _ := sim.BootDevice()
		return on, boot
	}
	waitSim := func(what string, ok func(on bool, boot string) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			on, boot := simState()
			if ok(on, boot) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ipmi_sim after 60 s: power on %v, boot device %q; want %s", on, boot, what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// afterAbort: the BMC goes off, and the power queue says so: the
	// desired and observed power are off with nothing left open.
	afterAbort := func(name string) {
		t.Helper()
		waitSim("off", func(on bool, _ string) bool { return !on })
		deadline := time.Now().Add(60 * time.Second)
		for {
			var p api.MachinePower
			call(admin, http.StatusOK, "GET", "/api/v1/machines/"+name+"/power", nil, &p)
			if p.Desired == "off" && p.Observed == "off" && len(p.Pending) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("power of %s 60 s after the abort: %+v", name, p)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if on, _ := simState(); on {
			t.Fatalf("ipmi_sim is on again after the abort")
		}
	}

	// An admin, bob, a deploy image, a READY machine behind the BMC.
	var bob api.User
	call(admin, http.StatusCreated, "POST", "/api/v1/users", api.CreateUser{Name: "bob"}, &bob)
	imgDir := t.TempDir()
	kernel, initrd := []byte("KERNEL-abort"), []byte("INITRD-abort")
	sum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	manifest, _ := json.Marshal(map[string]any{"name": "abort-os", "arch": "amd64", "purpose": "deploy", "files": []map[string]any{
		{"path": "vmlinuz", "role": "kernel", "sha256": sum(kernel), "size": len(kernel)},
		{"path": "initrd.img", "role": "initrd", "sha256": sum(initrd), "size": len(initrd)}}})
	for n, b := range map[string][]byte{"vmlinuz": kernel, "initrd.img": initrd, "rackd-image.json": manifest} {
		if err := os.WriteFile(filepath.Join(imgDir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	call(admin, http.StatusCreated, "POST", "/api/v1/images/import", api.ImportImage{Dir: imgDir}, nil)
	var m api.Machine
	call(admin, http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "n1", Arch: "amd64", MACs: []string{mac},
		State: "READY", Power: &api.PowerParams{Driver: "ipmi", Address: sim.Addr, Username: sim.User, Password: sim.Password}}, &m)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	asBob := []string{"RACKD_TOKEN=" + bob.Token}
	pxeOn := func(on bool, boot string) bool { return on && boot == "pxe" }

	// A commissioning, aborted by an admin: READY again (its hardware was
	// known), the BMC off, the commissioning credential dead.
	call(admin, http.StatusOK, "POST", "/api/v1/machines/n1/commission", api.ActionRequest{}, nil)
	waitSim("on, booting PXE", pxeOn)
	status, cred := claim(m)
	if status != http.StatusOK || cred.Phase != "commission" || cred.Token == "" {
		t.Fatalf("commissioning claim: %d %+v", status, cred)
	}
	code, _, errs := runCLI(t, d, asBob, "machines", "abort", "n1")
	if code != 1 || !strings.Contains(errs, "HTTP 403") {
		t.Fatalf("bob aborts the commissioning: exit %d %q, want a 403", code, errs)
	}
	out := mustCLI(t, d, asAdmin, "machines", "abort", "n1", "--reason", "wrong rack")
	if !strings.Contains(out, "READY") {
		t.Fatalf("machines abort of the commissioning:\n%s", out)
	}
	afterAbort("n1")
	if status, body := curlTo(cred.Token, "POST", enlist.PathCommissioned, enlist.Report{Machine: m.ID, Error: "a late report of the aborted phase"}); status != http.StatusUnauthorized {
		t.Fatalf("commissioning report with the aborted credential: %d %s, want 401", status, body)
	}
	if status, _ := claim(m); status != http.StatusForbidden {
		t.Fatalf("a claim after the abort: %d, want 403", status)
	}

	// A deployment, aborted by its owner: ALLOCATED, still bob's, the BMC
	// off, the deploy credential dead for the report and the seed.
	call(bob.Token, http.StatusCreated, "POST", "/api/v1/allocations", api.AllocateRequest{Name: "n1", AgentName: "e2e"}, nil)
	call(bob.Token, http.StatusOK, "POST", "/api/v1/machines/n1/deploy", api.ActionRequest{Image: "abort-os"}, nil)
	waitSim("on, booting PXE", pxeOn)
	status, cred = claim(m)
	if status != http.StatusOK || cred.Phase != "deploy" || cred.Token == "" {
		t.Fatalf("deploy claim: %d %+v", status, cred)
	}
	if status, body := curlTo(cred.Token, "GET", enlist.PathSeed, nil); status != http.StatusOK {
		t.Fatalf("seed with the deploy credential before the abort: %d %s", status, body)
	}
	var aborted api.Machine
	if err := json.Unmarshal([]byte(mustCLI(t, d, asBob, "machines", "abort", "n1", "--json")), &aborted); err != nil ||
		aborted.State != "ALLOCATED" || aborted.Owner != "bob" {
		t.Fatalf("machines abort of the deployment: %v %+v", err, aborted)
	}
	afterAbort("n1")
	if status, body := curlTo(cred.Token, "POST", enlist.PathDeployed, enlist.Report{Machine: m.ID, Error: "a late report of the aborted phase"}); status != http.StatusUnauthorized {
		t.Fatalf("deploy report with the aborted credential: %d %s, want 401", status, body)
	}
	if status, body := curlTo(cred.Token, "GET", enlist.PathSeed, nil); status != http.StatusUnauthorized {
		t.Fatalf("seed with the aborted credential: %d %s, want 401", status, body)
	}
	if status, _ := claim(m); status != http.StatusForbidden {
		t.Fatalf("a claim after the abort: %d, want 403", status)
	}

	// Nothing to abort now: 409, naming the state.
	code, _, errs = runCLI(t, d, asBob, "machines", "abort", "n1")
	if code != 1 || !strings.Contains(errs, "cannot abort a machine that is ALLOCATED") || !strings.Contains(errs, "HTTP 409") {
		t.Fatalf("abort of an ALLOCATED machine: exit %d %q", code, errs)
	}
	var evs []api.Event
	call(admin, http.StatusOK, "GET", "/api/v1/machines/n1/events", nil, &evs)
	var aborts []string
	for _, e := range evs {
		if e.Action == "abort" {
			aborts = append(aborts, e.Actor+":"+e.From+"->"+e.To)
		}
	}
	if got := strings.Join(aborts, " "); got != "admin:COMMISSIONING->READY bob:DEPLOYING->ALLOCATED" {
		t.Fatalf("abort events: %s", got)
	}
}
