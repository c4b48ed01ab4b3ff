package lab

import (
	"os"
	"strings"
	"testing"
)

// TestSummaryMatchesGuide: the next commands make lab prints are the
// guide's (docs/GETTING-STARTED.md, whose commands TestE2EGettingStarted
// runs), and the guide adds each machine with the BMC the lab gave it.
func TestSummaryMatchesGuide(t *testing.T) {
	guide, err := os.ReadFile("../docs/GETTING-STARTED.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st := &State{Dir: dir + "/var/lab", Token: "TOKEN", Complete: true,
		Machines: []Machine{MachineFor(dir+"/var/lab", 1), MachineFor(dir+"/var/lab", 2)}}
	if st.Machines[0].Driver != "ipmi" || st.Machines[1].Driver != "redfish" {
		t.Fatalf("machines %+v: want lab1 behind IPMI, lab2 behind Redfish", st.Machines)
	}
	t.Chdir(dir)
	var out strings.Builder
	st.summary(&out)
	next := out.String()[strings.Index(out.String(), "Next"):]
	var cmds []string
	for _, l := range strings.Split(next, "\n")[1:] {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "make lab-down") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("make lab prints %d next commands, want 3:\n%s", len(cmds), next)
	}
	for _, c := range append(cmds, st.Machines[1].AddCommand()) {
		if !strings.Contains(string(guide), "\n"+c+"\n") {
			t.Errorf("docs/GETTING-STARTED.md lacks the command %q (a line of its own)", c)
		}
	}
	for _, want := range []string{URL, "TOKEN", "lab1", "lab2", "10.80.1.1:623", "https://10.80.1.2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary does not name %s:\n%s", want, out.String())
		}
	}
}
