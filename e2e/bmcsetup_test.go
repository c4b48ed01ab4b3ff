package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rackd/agent"
	"rackd/api"
	"rackd/internal/netnstest"
	"rackd/internal/seal"
	"rackd/store"
)

// TestE2EBMCSetup is the BMC set-up at commissioning on a real VM with
// in-band IPMI: QEMU's KCS interface on a socket to the same ipmi_sim BMC
// whose LAN side rackd uses. The machine starts with the operator's
// manual power configuration and is commissioned with --force-bmc-setup;
// the commissioning environment loads ipmi_si and ipmi_devintf, creates
// the rackd user through /dev/ipmi0 and reports it; rackd stores it as
// the machine's ipmi power configuration. Then ipmitool, as that user with
// the password rackd stored, drives the BMC over RMCP+ (cipher suite 3),
// `user list` shows the user, and rackd powers the VM off through it.
func TestE2EBMCSetup(t *testing.T) {
	requireVM(t)
	requireAllE2E(t, "the set-up's IPMI commands are checked against ipmi_sim over RMCP+ (enlist/bmc), and the store's rule for the report in store/bmcsetup_test.go")
	netnstest.Tool(t, "ipmi_sim")
	netnstest.Tool(t, "ipmitool")
	img := enlistImage(t)
	requirePhaseModes(t, img)
	l := newLab(t, labOptions{})
	l.importImage(img)

	const memMB, cpus = 768, 2
	v := newBMCVMWith(t, l, memMB, cpus, vmDiskBytes(t), true)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The BMC's LAN address, as its firmware set-up would have it: where
	// rackd reaches it.
	for _, args := range [][]string{{"lan", "set", "1", "ipsrc", "static"}, {"lan", "set", "1", "ipaddr", v.sim.Host}} {
		if out, err := l.ipmitool(ctx, v, v.sim.User, v.sim.Password, args...); err != nil {
			t.Fatalf("ipmitool %v: %v: %s", args, err, out)
		}
	}

	var m api.Machine
	l.call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "vm1", MACs: []string{v.mac},
		Power: &api.PowerParams{Driver: "manual"}}, &m)
	l.cli("machines", "commission", "vm1", "--force-bmc-setup")
	// Powered by hand, as the manual driver asks: the operator presses
	// the BMC's power button.
	if out, err := l.ipmitool(ctx, v, v.sim.User, v.sim.Password, "chassis", "power", "on"); err != nil {
		t.Fatalf("power on: %v: %s", err, out)
	}
	m, took := l.waitState(m.ID, "READY", "FAILED_COMMISSIONING")
	t.Logf("commissioned with the BMC set-up in %.1fs", took.Seconds())
	console := v.text()
	if strings.Contains(console, "no in-band IPMI") {
		t.Fatalf("the environment found no /dev/ipmi0: does its initramfs carry ipmi_si and ipmi_devintf "+
			"(initramfs/modules.txt; RACKD_E2E_IMAGE may name an older image)?\n%s", console)
	}
	if !strings.Contains(console, "rackd-enlist: BMC set up: BMC "+v.sim.Host+" (static) on LAN channel 1: user 3 \"rackd\"") {
		t.Fatalf("the console does not show the BMC set-up:\n%s", console)
	}
	if m.Power.Driver != "ipmi" || m.Power.Address != v.sim.Host || m.Power.SetBy != "commissioning" {
		t.Fatalf("power after commissioning: %+v", m.Power)
	}
	if e := l.lastEventOf(m.ID, "bmc-setup"); !strings.Contains(e.Reason, "forced") {
		t.Errorf("bmc-setup event: %+v", e)
	}
	v.waitPower(false)

	p := l.storedPower(m.ID)
	if p.Username != "rackd" || len(p.Password) != 16 {
		t.Fatalf("stored power parameters: driver %s address %s user %q, password of %d bytes", p.Driver, p.Address, p.Username, len(p.Password))
	}
	for what, text := range map[string]string{"the console": v.text(), "rackd's log": l.log()} {
		if strings.Contains(text, p.Password) {
			t.Errorf("%s shows the BMC password", what)
		}
	}

	// ipmitool as the new user with the stored password: IPMI v2.0,
	// cipher suite 3.
	out, err := l.ipmitool(ctx, v, p.Username, p.Password, "chassis", "power", "status")
	if err != nil || !strings.Contains(out, "Chassis Power is off") {
		t.Fatalf("ipmitool -I lanplus -C 3 -U rackd: %v: %s", err, out)
	}
	out, err = l.ipmitool(ctx, v, p.Username, p.Password, "user", "list", "1")
	if err != nil || !strings.Contains(out, "rackd") {
		t.Fatalf("user list: %v:\n%s", err, out)
	}
	t.Logf("user list:\n%s", firstLines(out, 4))

	// rackd powers the VM through it: on, then off.
	l.cli("power", "on", "vm1", "--wait")
	v.waitPower(true)
	l.cli("power", "off", "vm1", "--wait")
	v.waitPower(false)
	// The BMC's power bit is off; its hook stops the VM's QEMU (SIGTERM,
	// then SIGKILL after 3 s).
	deadline := time.Now().Add(30 * time.Second)
	for pid := v.sim.MachinePID(); pid != 0; pid = v.sim.MachinePID() {
		if time.Now().After(deadline) {
			t.Fatalf("the VM's QEMU (pid %d) still runs 30 s after rackd's power off", pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ipmitool runs ipmitool -I lanplus -C 3 against v's BMC inside the lab's
// namespace, as user.
func (l *lab) ipmitool(ctx context.Context, v *bmcVM, user, password string, args ...string) (string, error) {
	var out string
	err := l.ns.Do(func() error {
		var err error
		out, err = v.sim.IpmitoolAs(ctx, user, password, args...)
		return err
	})
	return out, err
}

// lastEventOf is the newest event of the machine with that action.
func (l *lab) lastEventOf(id, action string) api.Event {
	l.t.Helper()
	var evs []api.Event
	l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/events", nil, &evs)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Action == action {
			return evs[i]
		}
	}
	l.t.Fatalf("no %s event among %+v", action, evs)
	return api.Event{}
}

// storedPower reads the machine's power parameters as rackd stored them,
// the password opened with rackd's keyring (the API never shows the
// credentials): rackd is stopped, its database read, and rackd started
// again.
func (l *lab) storedPower(id string) store.PowerParams {
	l.t.Helper()
	if err := l.rackd.Stop(30 * time.Second); err != nil {
		l.t.Logf("rackd stopped: %v", err)
	}
	l.logs = append(l.logs, l.rackd.Output())
	l.client.CloseIdleConnections()
	s, err := store.Open(filepath.Join(l.state, store.FileName),
		store.Options{Secrets: seal.File{Path: filepath.Join(l.state, agent.SecretsKeyFile)}})
	if err != nil {
		l.t.Fatalf("open rackd's store: %v", err)
	}
	m, err := s.MachineForPower(id)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.t.Fatalf("machine %s in rackd's store: %v", id, err)
	}
	l.startRackd(labOptions{})
	return m.Power
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
