package e2e

import (
	"net/http"
	"strings"
	"testing"

	"rackd/api"
)

// TestE2ERedfishCommissionDeploy: a machine powered only through Redfish
// (a simulated Redfish BMC whose power runs the VM; no IPMI anywhere) is
// commissioned (the BMC's one-time boot override set to PXE before the
// power-on; READY and powered off with its inventory), deployed (the image
// written, rebooted to its disk, DEPLOYED once the OS reports) and
// released (READY, powered off), with the BMC's certificate pinned at the
// first power command and every session the driver opened closed.
func TestE2ERedfishCommissionDeploy(t *testing.T) {
	requireVM(t)
	requireAllE2E(t, "the Redfish driver's power and one-time boot override are checked through the API against the simulated BMC, itself checked by redfishtool and sushy (agent TestPowerRedfish)")
	requireDiskDrivers(t)
	img := enlistImage(t)
	requirePhaseModes(t, img)
	l := newLab(t, labOptions{})
	l.importImage(img)
	goodDir, _ := rawImage(t, "e2e-raw", osMarker, 1)
	l.importImage(goodDir)

	const memMB, cpus = 768, 2
	v := newRedfishVM(t, l, memMB, cpus)
	var m api.Machine
	l.call(http.StatusCreated, "POST", "/api/v1/machines", api.CreateMachine{Hostname: "rf1", MACs: []string{v.mac},
		Power: &api.PowerParams{Driver: "redfish", Address: v.redfish.URL, Username: v.redfish.User, Password: v.redfish.Password}}, &m)

	// Commission.
	l.cli("machines", "commission", "rf1")
	v.waitPower(true)
	if target, boots := v.redfish.LastBoot(); target != "Pxe" || boots != 1 {
		t.Errorf("the first boot used override %q (boot %d), want Pxe (boot 1)", target, boots)
	}
	m, took := l.waitState(m.ID, "READY", "FAILED_COMMISSIONING")
	if m.CPUCount != cpus || m.MemoryMB != memMB || m.Inventory == nil || len(m.Inventory.Disks) != 1 {
		t.Fatalf("after commissioning: %+v, inventory %+v", m, m.Inventory)
	}
	v.waitPower(false)
	l.waitObservedOff(m.ID)
	t.Logf("commissioned through Redfish in %.1fs", took.Seconds())
	// The certificate seen at the first command is now the machine's pin.
	show := l.cli("machines", "show", "rf1")
	if !strings.Contains(strings.ToLower(show), strings.ToLower(v.redfish.Fingerprint())) {
		t.Errorf("machines show does not name the pinned certificate %s:\n%s", v.redfish.Fingerprint(), show)
	}

	// Deploy: written, rebooted to the disk, DEPLOYED once "the OS"
	// reports.
	l.cli("allocate", "--name", "rf1", "--agent-name", "e2e")
	l.cli("machines", "deploy", "rf1", "--image", "e2e-raw")
	m = l.waitImageWritten(m.ID)
	v.waitConsole(osMarker, 1)
	if status := l.phoneHomeFromDisk(v, m.Deployment.InstanceID); status != http.StatusOK {
		t.Fatalf("phone-home with the seed's URL: %d", status)
	}
	m, took = l.waitState(m.ID, "DEPLOYED", "FAILED_DEPLOYMENT")
	t.Logf("deployed through Redfish: DEPLOYED %.1fs after the OS phoned home", took.Seconds())

	// Release: READY, powered off through Redfish.
	l.cli("release", "rf1")
	l.waitState(m.ID, "READY")
	v.waitPower(false)
	l.waitObservedOff(m.ID)

	st := v.redfish.Stats()
	if st.Unauthorized != 0 {
		t.Errorf("the BMC answered 401 %d times", st.Unauthorized)
	}
	if len(st.Resets) == 0 {
		t.Error("the BMC saw no ComputerSystem.Reset")
	}
	t.Logf("the Redfish BMC saw %d requests, resets %v, %d sessions created, %d deleted", st.Requests, st.Resets, st.SessionsCreated, st.SessionsDeleted)
}
