package bootconf

import (
	"reflect"
	"strings"
	"testing"
)

func TestDecideEveryState(t *testing.T) {
	// The store's lifecycle states (store.States), spelled out so that
	// this package does not import store, and a few it does not have.
	states := []string{
		"NEW", "COMMISSIONING", "FAILED_COMMISSIONING", "READY", "ALLOCATED",
		"DEPLOYING", "DEPLOYED", "FAILED_DEPLOYMENT", "RELEASING", "BROKEN", "RETIRED",
		"", "deploying", "SOMETHING_NEW",
	}
	env := testEnvironments("amd64")
	want := map[string]Mode{
		"COMMISSIONING": ModeCommission,
		"DEPLOYING":     ModeDeploy,
		// Every other state boots from local disk.
	}
	for _, state := range states {
		for _, known := range []bool{true, false} {
			name := state
			if name == "" {
				name = "empty"
			}
			if !known {
				name += "/unknown"
			}
			t.Run(name, func(t *testing.T) {
				m := MachineInfo{ID: "m-1", Hostname: "web1", State: state, Arch: "amd64", Image: "ubuntu-24.04"}
				d := Decide(m, known, env)
				wantMode, boots := want[state]
				if !boots {
					wantMode = ModeLocal
				}
				var wantEnv Environment
				switch wantMode {
				case ModeCommission:
					wantEnv = env.Commission
				case ModeDeploy:
					wantEnv = env.Deploy["ubuntu-24.04"]
				}
				if !known {
					// An unknown MAC enlists whatever the
					// state field says: nothing about it is
					// known.
					wantMode, wantEnv = ModeEnlist, env.Enlist
				}
				if d.Mode != wantMode {
					t.Errorf("Mode = %q, want %q", d.Mode, wantMode)
				}
				if !reflect.DeepEqual(d.Env, wantEnv) {
					t.Errorf("Env = %+v, want %+v", d.Env, wantEnv)
				}
				if d.Missing != "" {
					t.Errorf("Missing = %q with every environment imported", d.Missing)
				}
				if d.Known != known {
					t.Errorf("Known = %v, want %v", d.Known, known)
				}
				if !known && d.Machine != (MachineInfo{}) {
					t.Errorf("an unknown machine's decision carries %+v", d.Machine)
				}
				if d.Boots() != (wantMode != ModeLocal) {
					t.Errorf("Boots() = %v for mode %q", d.Boots(), wantMode)
				}
				// Only a deployed machine's local disk holds the
				// system rackd put there.
				if wantInstalled := known && state == "DEPLOYED"; d.InstalledOS != wantInstalled {
					t.Errorf("InstalledOS = %v, want %v", d.InstalledOS, wantInstalled)
				}
			})
		}
	}
}

// TestDecideImageWritten: a DEPLOYING machine whose image is written boots
// its local disk, which holds the system rackd deployed.
func TestDecideImageWritten(t *testing.T) {
	m := MachineInfo{ID: "m-1", State: "DEPLOYING", Arch: "amd64", Image: "ubuntu-24.04", DiskWritten: true}
	if d := Decide(m, true, testEnvironments("amd64")); d.Mode != ModeLocal || !d.InstalledOS || d.Boots() {
		t.Errorf("decision %+v: want the local disk, the installed system", d)
	}
}

func TestDecideMissing(t *testing.T) {
	full := testEnvironments("arm64")
	tests := map[string]struct {
		m       MachineInfo
		known   bool
		env     Environments
		mode    Mode
		missing string
	}{
		"no enlistment environment": {
			m: MachineInfo{Arch: "arm64"}, env: Environments{}, mode: ModeEnlist,
			missing: "rackd: no enlistment environment is imported for arm64: booting from local disk",
		},
		"no commissioning environment": {
			m: MachineInfo{ID: "m-1", State: "COMMISSIONING", Arch: "arm64"}, known: true,
			env: Environments{Enlist: full.Enlist}, mode: ModeCommission,
			missing: "rackd: no commissioning environment is imported for arm64: booting from local disk",
		},
		"deploy image not imported": {
			m: MachineInfo{ID: "m-1", State: "DEPLOYING", Arch: "arm64", Image: "debian-13"}, known: true,
			env: full, mode: ModeDeploy,
			missing: "rackd: deploy image debian-13 is not imported for arm64: booting from local disk",
		},
		"deploy image registered without a kernel": {
			m: MachineInfo{ID: "m-1", State: "DEPLOYING", Image: "half"}, known: true,
			env: Environments{Deploy: map[string]Environment{"half": {Initrds: []string{"x"}}}}, mode: ModeDeploy,
			missing: "rackd: deploy image half is not imported for amd64: booting from local disk",
		},
		"deploying without an image": {
			m: MachineInfo{ID: "m-1", State: "DEPLOYING"}, known: true, env: full, mode: ModeDeploy,
			missing: "rackd: the machine is DEPLOYING but has no deploy image: booting from local disk",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Decide(tc.m, tc.known, tc.env)
			if d.Mode != tc.mode || d.Missing != tc.missing {
				t.Errorf("Decide = mode %q, missing %q; want %q, %q", d.Mode, d.Missing, tc.mode, tc.missing)
			}
			if d.Boots() || d.Env.Available() || d.Cmdline(testBase) != nil {
				t.Errorf("a decision with a missing environment boots: %+v", d)
			}
		})
	}
}

func TestDecideArch(t *testing.T) {
	// The store's default: a machine without an arch is amd64.
	if d := Decide(MachineInfo{ID: "m", State: "READY"}, true, Environments{}); d.Arch != "amd64" {
		t.Errorf("Arch = %q, want amd64", d.Arch)
	}
	if d := Decide(MachineInfo{Arch: "arm64"}, false, Environments{}); d.Arch != "arm64" {
		t.Errorf("unknown machine rendered for arm64: Arch = %q", d.Arch)
	}
}

func TestCmdline(t *testing.T) {
	env := testEnvironments("amd64")
	tests := map[string]struct {
		m     MachineInfo
		known bool
		want  string
	}{
		"enlist: no identity": {
			m:    MachineInfo{ID: "ignored", State: "DEPLOYING"},
			want: "rackd.url=http://10.0.0.1:5240 rackd.mode=enlist console=ttyS0,115200n8 quiet",
		},
		// No credential, ever: the environment claims it from rackd.
		"commission": {
			m: MachineInfo{ID: "m-1", State: "COMMISSIONING"}, known: true,
			want: "rackd.url=http://10.0.0.1:5240 rackd.mode=commission rackd.machine=m-1 console=tty0 console=ttyS0,115200n8",
		},
		"deploy": {
			m: MachineInfo{ID: "m-2", State: "DEPLOYING", Image: "ubuntu-24.04"}, known: true,
			want: "rackd.url=http://10.0.0.1:5240 rackd.mode=deploy rackd.machine=m-2 ro ip=dhcp",
		},
		"image arguments for init come last": {
			m: MachineInfo{ID: "m-5", State: "DEPLOYING", Image: "debian-13-rescue"}, known: true,
			want: "rackd.url=http://10.0.0.1:5240 rackd.mode=deploy rackd.machine=m-5 console=ttyS0 -- systemd.unit=rescue.target",
		},
		"local: no command line": {
			m: MachineInfo{ID: "m-3", State: "DEPLOYED"}, known: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := strings.Join(Decide(tc.m, tc.known, env).Cmdline(testBase), " ")
			if got != tc.want {
				t.Errorf("Cmdline =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
	// Cmdline must not alias the environment's Args.
	d := Decide(MachineInfo{}, false, env)
	_ = append(d.Cmdline(testBase)[:1], "clobbered")
	if env.Enlist.Args[1] != "quiet" {
		t.Errorf("Cmdline wrote into the environment's Args: %q", env.Enlist.Args)
	}
}
