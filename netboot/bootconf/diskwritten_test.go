package bootconf

import "testing"

// TestDecideDiskWritten: a DEPLOYING machine whose image is written boots
// that image from its disk, even with the deploy environment at hand, and
// in no other state does the flag change anything.
func TestDecideDiskWritten(t *testing.T) {
	env := testEnvironments("amd64")
	for _, tc := range []struct {
		state string
		want  Mode
	}{
		{"DEPLOYING", ModeLocal},
		{"COMMISSIONING", ModeCommission},
		{"DEPLOYED", ModeLocal},
		{"READY", ModeLocal},
	} {
		m := MachineInfo{ID: "m-1", State: tc.state, Arch: "amd64", Image: "ubuntu-24.04", DiskWritten: true}
		d := Decide(m, true, env)
		if d.Mode != tc.want || d.Missing != "" {
			t.Errorf("%s with its disk written: mode %q (missing %q), want %q", tc.state, d.Mode, d.Missing, tc.want)
		}
		if tc.want == ModeLocal && (d.Boots() || d.Cmdline("http://10.0.0.1:5240") != nil) {
			t.Errorf("%s with its disk written boots a kernel", tc.state)
		}
	}
	if d := Decide(MachineInfo{ID: "m-1", State: "DEPLOYING", Image: "ubuntu-24.04"}, true, env); d.Mode != ModeDeploy {
		t.Errorf("DEPLOYING before the image is written: mode %q, want deploy", d.Mode)
	}
}
