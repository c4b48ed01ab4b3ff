package agent

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"rackd/enlist"
	"rackd/store"
)

func TestReportRequest(t *testing.T) {
	inv := &enlist.Inventory{MACs: []string{"52:54:00:00:00:01"}, Arch: "amd64", CPUCount: 2, MemoryMB: 2048,
		Disks: []enlist.Disk{{Name: "vda", SizeBytes: 1 << 30}}, BMCAddress: "10.0.0.9",
		DMI: enlist.DMI{Vendor: "QEMU", Product: "Standard PC", Serial: "s1", UUID: "u1"}}
	tests := map[string]struct {
		rep   enlist.Report
		phase string
		want  store.PhaseReport
		err   string
	}{
		"commissioning inventory": {rep: enlist.Report{Machine: "m-1", Inventory: inv}, phase: store.PhaseCommission,
			want: store.PhaseReport{Machine: "m-1", Phase: store.PhaseCommission, Token: "tok", Inventory: &store.CommissionInventory{
				Arch: "amd64", MACs: []string{"52:54:00:00:00:01"}, CPUCount: 2, MemoryMB: 2048, SystemUUID: "u1",
				Inventory: store.Inventory{Vendor: "QEMU", Product: "Standard PC", Serial: "s1", BMCAddress: "10.0.0.9",
					Disks: []store.Disk{{Name: "vda", SizeBytes: 1 << 30}}}}}},
		"commissioning failed": {rep: enlist.Report{Machine: "m-1", Error: "no disks"}, phase: store.PhaseCommission,
			want: store.PhaseReport{Machine: "m-1", Phase: store.PhaseCommission, Token: "tok", Error: "no disks"}},
		"commissioning with neither": {rep: enlist.Report{Machine: "m-1"}, phase: store.PhaseCommission,
			err: "a commissioning report carries the inventory, or an error"},
		"deployment": {rep: enlist.Report{Machine: "m-1", Disk: "vda", Bytes: 42, SHA256: strings.Repeat("a", 64), WriteSeconds: 0.38}, phase: store.PhaseDeploy,
			want: store.PhaseReport{Machine: "m-1", Phase: store.PhaseDeploy, Token: "tok", Bytes: 42, WriteTime: 380 * time.Millisecond,
				Detail: "42 bytes to vda, sha256 " + strings.Repeat("a", 64)}},
		"deployment without details": {rep: enlist.Report{Machine: "m-1"}, phase: store.PhaseDeploy,
			want: store.PhaseReport{Machine: "m-1", Phase: store.PhaseDeploy, Token: "tok"}},
		"erase": {rep: enlist.Report{Machine: "m-1", Erased: []string{"vda", "nvme0n1"}}, phase: store.PhaseErase,
			want: store.PhaseReport{Machine: "m-1", Phase: store.PhaseErase, Token: "tok", Detail: "erased vda nvme0n1"}},
		"invalid machine id":      {rep: enlist.Report{Machine: "M 1"}, phase: store.PhaseDeploy, err: "invalid report: machine"},
		"negative write time":     {rep: enlist.Report{Machine: "m-1", WriteSeconds: -1}, phase: store.PhaseDeploy, err: "invalid report: write_seconds"},
		"write time not a number": {rep: enlist.Report{Machine: "m-1", WriteSeconds: math.NaN()}, phase: store.PhaseDeploy, err: "invalid report: write_seconds"},
		"invalid disk": {rep: enlist.Report{Machine: "m-1", Erased: []string{"../sda"}}, phase: store.PhaseErase,
			err: "invalid report: disk name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := reportRequest(tc.rep, tc.phase, "tok")
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("reportRequest = %+v, %v; want an error starting %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("reportRequest =\n%+v, %v\nwant\n%+v", got, err, tc.want)
			}
		})
	}
}

func TestReportOutcome(t *testing.T) {
	tests := []struct {
		action   store.Action
		reported string
		want     string
	}{
		{"", "", "replayed"},
		{"", "it broke", "replayed"},
		{store.ActionCommissioningDone, "", "done"},
		{store.ActionDeploymentDone, "", "done"},
		{store.ActionReleaseDone, "", "done"},
		// An erase that failed still completes the release.
		{store.ActionReleaseDone, "wipe failed", "failed"},
		{store.ActionCommissioningFailed, "no disks", "failed"},
		// Refused by the store: an inventory that contradicts the rack.
		{store.ActionCommissioningFailed, "", "failed"},
		{store.ActionDeploymentFailed, "", "failed"},
	}
	for _, tc := range tests {
		if got := reportOutcome(store.ReportResult{Action: tc.action}, tc.reported); got != tc.want {
			t.Errorf("reportOutcome(%q, %q) = %q, want %q", tc.action, tc.reported, got, tc.want)
		}
	}
	if got := reportOutcome(store.ReportResult{DiskWritten: true}, ""); got != "image_written" {
		t.Errorf("reportOutcome of an image written = %q, want image_written", got)
	}
	// The image written: the machine reboots into it, DEPLOYING still.
	if got := reportAnswer(store.Machine{State: store.StateDeploying, DiskWritten: time.Now()}); got.Action != enlist.ActionReboot {
		t.Errorf("reportAnswer(DEPLOYING, image written) = %+v, want reboot", got)
	}
	if got := reportAnswer(store.Machine{State: store.StateDeploying}); got.Action != enlist.ActionPowerOff {
		t.Errorf("reportAnswer(DEPLOYING) = %+v, want poweroff", got)
	}
	for state, want := range map[store.State]enlist.Action{store.StateDeployed: enlist.ActionReboot,
		store.StateReady: enlist.ActionPowerOff, store.StateFailedDeployment: enlist.ActionPowerOff,
		store.StateFailedCommissioning: enlist.ActionPowerOff} {
		if got := reportAnswer(store.Machine{State: state}); got.Action != want || got.State != string(state) {
			t.Errorf("reportAnswer(%s) = %+v, want %s", state, got, want)
		}
	}
}
