package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/api"
	"rackd/appliance"
)

// TestApplianceUpdateExitsForReboot runs the real binary as the appliance's
// init runs it: the build side's keygen and bundle make a signed bundle,
// `rackd appliance update` streams it, a bundle signed with another key is
// refused with the slot untouched, and after arming the daemon exits with
// appliance.ExitReboot, its store closed cleanly (a new rackd opens it).
func TestApplianceUpdateExitsForReboot(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	slotB := bytes.Repeat([]byte{0x5a}, 8<<20)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "slot-a"), make([]byte, 8<<20), 0o644))
	must(os.WriteFile(filepath.Join(dir, "slot-b"), slotB, 0o644))
	must(appliance.CreateEnvFile(filepath.Join(dir, "grubenv"), appliance.EnvOf(map[string]string{
		appliance.EnvGood: "a", appliance.EnvTry: "", appliance.EnvTries: "0", appliance.EnvReset: ""})))
	payload := bytes.Repeat([]byte("squashfs? no, a test payload. "), 200000)
	must(os.WriteFile(filepath.Join(dir, "slot.img"), payload, 0o644))

	// The build side, with the real binary.
	for _, args := range [][]string{
		{"appliance", "keygen", filepath.Join(dir, "keys")},
		{"appliance", "keygen", filepath.Join(dir, "other")},
		{"appliance", "bundle", "--key", filepath.Join(dir, "keys", "signing.key"), "--payload", filepath.Join(dir, "slot.img"),
			"--version", "v2.0", "--build", "200", "--arch", appliance.Descriptor{}.ArchOrRuntime(), "-o", filepath.Join(dir, "good.bundle")},
		{"appliance", "bundle", "--key", filepath.Join(dir, "other", "signing.key"), "--payload", filepath.Join(dir, "slot.img"),
			"--version", "v2.0", "--build", "200", "--arch", appliance.Descriptor{}.ArchOrRuntime(), "-o", filepath.Join(dir, "other.bundle")},
	} {
		if code, out := runToExit(t, args...); code != 0 {
			t.Fatalf("rackd %v: exit %d\n%s", args, code, out)
		}
	}
	desc := appliance.Descriptor{Booted: appliance.SlotA, Version: "v1.0", Build: 100,
		Slots:   map[appliance.Slot]string{appliance.SlotA: filepath.Join(dir, "slot-a"), appliance.SlotB: filepath.Join(dir, "slot-b")},
		GrubEnv: filepath.Join(dir, "grubenv"), PublicKey: filepath.Join(dir, "keys", "signing.pub"), StatusFile: filepath.Join(dir, "status.json")}
	must(appliance.SaveDescriptor(filepath.Join(dir, "appliance.json"), desc))
	config := filepath.Join(dir, "rackd.toml")
	must(os.WriteFile(config, []byte("[appliance]\ndescriptor = \""+filepath.Join(dir, "appliance.json")+"\"\n"), 0o644))

	d := startDaemon(t, state, "--config", config)
	asAdmin := []string{"RACKD_STATE_DIR=" + state, "RACKD_TOKEN="}
	if out := mustCLI(t, d, asAdmin, "appliance", "status"); !strings.Contains(out, "running: v1.0 (build 100) from slot a") {
		t.Fatalf("status:\n%s", out)
	}
	code, _, errOut := runCLI(t, d, asAdmin, "appliance", "update", filepath.Join(dir, "other.bundle"))
	if code != 1 || !strings.Contains(errOut, "bundle_signature") {
		t.Fatalf("other key: exit %d %s", code, errOut)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "slot-b")); !bytes.Equal(got, slotB) {
		t.Fatal("a bundle signed with another key was written to the slot")
	}

	code, out, errOut := runCLI(t, d, asAdmin, "appliance", "update", filepath.Join(dir, "good.bundle"))
	if code != 0 || !strings.Contains(out, "rebooting into slot b") || !strings.Contains(errOut, "done") {
		t.Fatalf("update: exit %d\n%s%s", code, out, errOut)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("rackd did not exit after arming the update:\n%s", d.stderr.String())
	}
	if got := d.cmd.ProcessState.ExitCode(); got != appliance.ExitReboot {
		t.Fatalf("rackd exited %d, want %d:\n%s", got, appliance.ExitReboot, d.stderr.String())
	}
	if !strings.Contains(d.stderr.String(), `"msg":"rackd stopped"`) {
		t.Fatalf("rackd did not shut down cleanly:\n%s", d.stderr.String())
	}
	got, _ := os.ReadFile(filepath.Join(dir, "slot-b"))
	if !bytes.Equal(got[:len(payload)], payload) {
		t.Fatal("slot b does not hold the payload")
	}
	// GRUB's own tool sees the armed trial.
	if ge, err := exec.LookPath("grub-editenv"); err == nil {
		list, err := exec.Command(ge, filepath.Join(dir, "grubenv"), "list").CombinedOutput()
		if err != nil || !strings.Contains(string(list), "rackd_try=b\n") || !strings.Contains(string(list), "rackd_tries=1\n") {
			t.Fatalf("grub-editenv list: %v\n%s", err, list)
		}
	} else {
		t.Log("grub-editenv not installed: grubenv checked with the appliance package only")
	}
	env, err := appliance.ReadEnvFile(filepath.Join(dir, "grubenv"))
	if err != nil || env.Get(appliance.EnvTry) != "b" || env.Get(appliance.EnvTries) != "1" {
		t.Fatalf("grubenv %v %v", env, err)
	}
	// The store was closed cleanly: the next rackd opens it at once and
	// reports the armed update.
	d2 := startDaemon(t, state, "--config", config)
	if out := mustCLI(t, d2, asAdmin, "appliance", "status"); !strings.Contains(out, "v2.0 (build 200) to slot b: armed") || !strings.Contains(out, "next boot: slot b (trial of an update)") {
		t.Fatalf("status after restart:\n%s", out)
	}
	d2.stop(t)
}

// TestE2EHealthzDHCPBound: with a DHCP interface configured, /healthz
// answers 200 only once that interface is served, and names it.
func TestE2EHealthzDHCPBound(t *testing.T) {
	l := newE2ELab(t)
	deadline := time.Now().Add(20 * time.Second)
	var h api.Health
	for {
		resp, err := l.client.Get(l.d.url + "/healthz")
		if err == nil {
			h = api.Health{}
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(h.Status, "DHCP interface "+l.br) {
				t.Fatalf("healthz %d %+v", resp.StatusCode, h)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz not 200 within 20s: %v %+v", err, h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h.Status != "ok" || h.Store != "ok" || len(h.DHCPBound) != 1 || h.DHCPBound[0] != l.br || len(h.NotReady) != 0 {
		t.Fatalf("healthz %+v", h)
	}
}
