package store_test

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"rackd/store"
	"rackd/store/storetest"
)

// Test actors. Only admins are known to the store as such; the others are
// whatever the API authenticated.
var (
	admin = storetest.Admin
	alice = store.Actor{Name: "alice"}
	bob   = store.Actor{Name: "bob"}
)

// manual is the power driver of machines that tests commission: one
// without any is refused, as nothing would boot it.
var manual = store.PowerParams{Driver: "manual"}

// mac returns a distinct, valid MAC address for i.
func mac(i int) string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
}

var macSeq struct {
	sync.Mutex
	n int
}

// nextMAC hands out MACs that no other machine of the test binary uses.
func nextMAC() string {
	macSeq.Lock()
	defer macSeq.Unlock()
	macSeq.n++
	return mac(0x800000 + macSeq.n)
}

// create adds a machine as admin; hostname is required, a MAC is made up when
// nm has none.
func create(t testing.TB, s *store.Store, nm store.NewMachine) store.Machine {
	t.Helper()
	if len(nm.MACs) == 0 {
		nm.MACs = []string{nextMAC()}
	}
	m, err := s.CreateMachine(context.Background(), admin, nm)
	if err != nil {
		t.Fatalf("CreateMachine(%s): %v", nm.Hostname, err)
	}
	return m
}

// ready adds a READY machine.
func ready(t testing.TB, s *store.Store, hostname string) store.Machine {
	t.Helper()
	return create(t, s, store.NewMachine{Hostname: hostname, State: store.StateReady, CPUCount: 4, MemoryMB: 4096})
}

// allocate allocates a machine by name and fails the test on refusal.
func allocate(t testing.TB, s *store.Store, actor store.Actor, name, agent string) store.AllocateResult {
	t.Helper()
	res, err := s.Allocate(context.Background(), actor, store.AllocateRequest{Name: name, AgentName: agent})
	if err != nil {
		t.Fatalf("%s allocates %s: %v", actor.Name, name, err)
	}
	return res
}

// transition applies an action and fails the test on refusal. A deploy
// installs the image "debian", imported for the occasion.
func transition(t testing.TB, s *store.Store, actor store.Actor, machine string, action store.Action) store.Machine {
	t.Helper()
	req := store.TransitionRequest{Machine: machine, Action: action}
	if action == store.ActionDeploy {
		req.Image = "debian"
		storetest.DeployImages(t, s, "amd64", req.Image)
	}
	m, err := s.Transition(context.Background(), actor, req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", actor.Name, action, machine, err)
	}
	return m
}

// wantCode fails the test unless err is a domain refusal with code want.
func wantCode(t testing.TB, err error, want store.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want refusal %s", want)
	}
	if got := store.CodeOf(err); got != want {
		t.Fatalf("got %v (code %q), want code %q", err, got, want)
	}
}

// snapshot is everything a refusal must leave alone.
type snapshot struct {
	Machines []store.Machine
	Events   map[string][]store.Event
}

func snap(t testing.TB, s *store.Store) snapshot {
	t.Helper()
	ms, err := s.ListMachines(store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sn := snapshot{Machines: ms, Events: map[string][]store.Event{}}
	for _, m := range ms {
		ev, err := s.Events(m.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		sn.Events[m.ID] = ev
	}
	return sn
}

func (sn snapshot) mustEqual(t testing.TB, after snapshot) {
	t.Helper()
	if !reflect.DeepEqual(sn, after) {
		t.Fatalf("a refusal changed the database:\nbefore %+v\nafter  %+v", sn, after)
	}
}

func TestCreateMachineInvalid(t *testing.T) {
	good := func() store.NewMachine {
		return store.NewMachine{Hostname: "web1", MACs: []string{"52:54:00:00:00:01"}}
	}
	tests := map[string]struct {
		actor   store.Actor
		change  func(*store.NewMachine)
		code    store.Code
		message string
	}{
		"empty hostname":       {admin, func(nm *store.NewMachine) { nm.Hostname = "" }, store.CodeInvalid, "invalid hostname"},
		"underscore":           {admin, func(nm *store.NewMachine) { nm.Hostname = "web_1" }, store.CodeInvalid, "invalid hostname"},
		"leading dash":         {admin, func(nm *store.NewMachine) { nm.Hostname = "-web" }, store.CodeInvalid, "invalid hostname"},
		"empty label":          {admin, func(nm *store.NewMachine) { nm.Hostname = "web..rack" }, store.CodeInvalid, "invalid hostname"},
		"label of 64":          {admin, func(nm *store.NewMachine) { nm.Hostname = strings.Repeat("a", 64) }, store.CodeInvalid, "invalid hostname"},
		"hostname of 254":      {admin, func(nm *store.NewMachine) { nm.Hostname = strings.Repeat(strings.Repeat("a", 62)+".", 4) + "aa" }, store.CodeInvalid, "invalid hostname"},
		"no MAC":               {admin, func(nm *store.NewMachine) { nm.MACs = nil }, store.CodeInvalid, "at least one MAC"},
		"garbage MAC":          {admin, func(nm *store.NewMachine) { nm.MACs = []string{"not-a-mac"} }, store.CodeInvalid, `invalid MAC address "not-a-mac"`},
		"five octets":          {admin, func(nm *store.NewMachine) { nm.MACs = []string{"52:54:00:00:01"} }, store.CodeInvalid, "invalid MAC address"},
		"EUI-64":               {admin, func(nm *store.NewMachine) { nm.MACs = []string{"52:54:00:00:00:01:02:03"} }, store.CodeInvalid, "six octets"},
		"one bad MAC of two":   {admin, func(nm *store.NewMachine) { nm.MACs = append(nm.MACs, "zz:54:00:00:00:02") }, store.CodeInvalid, "invalid MAC address"},
		"MAC twice":            {admin, func(nm *store.NewMachine) { nm.MACs = []string{"52:54:00:AA:BB:CC", "52-54-00-aa-bb-cc"} }, store.CodeInvalid, "52:54:00:aa:bb:cc is listed twice"},
		"state ALLOCATED":      {admin, func(nm *store.NewMachine) { nm.State = store.StateAllocated }, store.CodeInvalid, "NEW, READY or DEPLOYED"},
		"state lower-case":     {admin, func(nm *store.NewMachine) { nm.State = "ready" }, store.CodeInvalid, "NEW, READY or DEPLOYED"},
		"bad arch":             {admin, func(nm *store.NewMachine) { nm.Arch = "x86 64" }, store.CodeInvalid, "invalid arch"},
		"negative cpu":         {admin, func(nm *store.NewMachine) { nm.CPUCount = -1 }, store.CodeInvalid, "negative"},
		"negative memory":      {admin, func(nm *store.NewMachine) { nm.MemoryMB = -1 }, store.CodeInvalid, "negative"},
		"bad tag":              {admin, func(nm *store.NewMachine) { nm.Tags = []string{"has space"} }, store.CodeInvalid, "invalid tag"},
		"long zone":            {admin, func(nm *store.NewMachine) { nm.Zone = strings.Repeat("z", 65) }, store.CodeInvalid, "zone"},
		"non-admin":            {alice, func(*store.NewMachine) {}, store.CodeForbidden, "only an admin"},
		"non-admin, DEPLOYED":  {alice, func(nm *store.NewMachine) { nm.State = store.StateDeployed }, store.CodeForbidden, "only an admin"},
		"non-admin, bad input": {alice, func(nm *store.NewMachine) { nm.Hostname = "" }, store.CodeForbidden, "only an admin"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			nm := good()
			tc.change(&nm)
			macs := append([]string(nil), nm.MACs...)
			_, err := s.CreateMachine(t.Context(), tc.actor, nm)
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not say %q", err, tc.message)
			}
			if !reflect.DeepEqual(nm.MACs, macs) {
				t.Errorf("CreateMachine changed the caller's MACs: %q -> %q", macs, nm.MACs)
			}
			if ms, _ := s.ListMachines(store.Filter{}); len(ms) != 0 {
				t.Errorf("a refused create left machines: %+v", ms)
			}
		})
	}
}

func TestCreateMachineConflict(t *testing.T) {
	tests := map[string]struct {
		hostname string
		macs     []string
		message  string
	}{
		"same hostname":              {"web1", []string{"52:54:00:00:00:09"}, `hostname "web1" is already used`},
		"hostname in other case":     {"WEB1", []string{"52:54:00:00:00:09"}, `hostname "web1" is already used`},
		"same MAC":                   {"web2", []string{"52:54:00:00:00:01"}, "MAC address 52:54:00:00:00:01 already belongs"},
		"same MAC, other spelling":   {"web2", []string{"52-54-00-00-00-01"}, "MAC address 52:54:00:00:00:01 already belongs"},
		"second MAC taken":           {"web2", []string{"52:54:00:00:00:09", "52:54:00:00:00:02"}, "MAC address 52:54:00:00:00:02 already belongs"},
		"hostname and MAC both used": {"web1", []string{"52:54:00:00:00:02"}, "already"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			first := create(t, s, store.NewMachine{Hostname: "web1", MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}})
			before := snap(t, s)
			_, err := s.CreateMachine(t.Context(), admin, store.NewMachine{Hostname: tc.hostname, MACs: tc.macs})
			wantCode(t, err, store.CodeConflict)
			if !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), first.ID) {
				t.Errorf("error %q should say %q and name machine %s", err, tc.message, first.ID)
			}
			before.mustEqual(t, snap(t, s))
			// The free MAC of the refused request was not indexed either.
			_, err = s.MachineByMAC("52:54:00:00:00:09")
			wantCode(t, err, store.CodeNotFound)
		})
	}
}

func TestCreateMachineNormalizes(t *testing.T) {
	s := storetest.New(t)
	m := create(t, s, store.NewMachine{Hostname: " Web1.Rack ", MACs: []string{"52-54-00-AB-CD-EF", "AA:BB:CC:00:11:22"}})
	if m.Hostname != "web1.rack" || m.Arch != "amd64" {
		t.Errorf("hostname %q arch %q, want web1.rack amd64", m.Hostname, m.Arch)
	}
	if want := []string{"52:54:00:ab:cd:ef", "aa:bb:cc:00:11:22"}; !reflect.DeepEqual(m.MACs, want) {
		t.Errorf("MACs %q, want %q", m.MACs, want)
	}
	for _, q := range []string{"52:54:00:ab:cd:ef", "52-54-00-AB-CD-EF", "5254.00ab.cdef", "aa:bb:cc:00:11:22"} {
		got, err := s.MachineByMAC(q)
		if err != nil || got.ID != m.ID {
			t.Errorf("MachineByMAC(%q) = %s, %v; want %s", q, got.ID, err, m.ID)
		}
	}
	for _, q := range []string{m.ID, "web1.rack", "WEB1.RACK"} {
		if got, err := s.Machine(q); err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("Machine(%q) = %+v, %v; want %+v", q, got, err, m)
		}
	}
	_, err := s.MachineByMAC("52:54:00:ab:cd:ee")
	wantCode(t, err, store.CodeNotFound)
	_, err = s.MachineByMAC("nonsense")
	wantCode(t, err, store.CodeInvalid)
	_, err = s.Machine("web2")
	wantCode(t, err, store.CodeNotFound)
}

func TestCreateMachineStates(t *testing.T) {
	tests := map[string]struct {
		state        store.State
		want         store.State
		commissioned bool
		owner, agent string
	}{
		"default is NEW": {"", store.StateNew, false, "", ""},
		"NEW":            {store.StateNew, store.StateNew, false, "", ""},
		"READY":          {store.StateReady, store.StateReady, true, "", ""},
		"DEPLOYED":       {store.StateDeployed, store.StateDeployed, true, admin.Name, "juju-1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			m := create(t, s, store.NewMachine{Hostname: "web1", State: tc.state, AgentName: "juju-1"})
			if m.State != tc.want || m.Commissioned != tc.commissioned || m.Owner != tc.owner || m.AgentName != tc.agent {
				t.Errorf("created %s commissioned=%t owner %q agent %q; want %s %t %q %q",
					m.State, m.Commissioned, m.Owner, m.AgentName, tc.want, tc.commissioned, tc.owner, tc.agent)
			}
			if got, _ := s.Machine(m.ID); !reflect.DeepEqual(got, m) {
				t.Errorf("stored %+v\nreturned %+v", got, m)
			}
			ev, err := s.Events(m.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ev) != 1 || ev[0].Action != "create" || ev[0].Actor != admin.Name || ev[0].From != "" ||
				ev[0].To != tc.want || ev[0].Machine != m.ID || !ev[0].Time.Equal(m.Created) {
				t.Errorf("events %+v, want one create event to %s by %s", ev, tc.want, admin.Name)
			}
			// A machine created DEPLOYED is held by its creator: allocating it
			// again by name under the same agent name is the seed-000 no-op,
			// anyone else is refused, and a constraints search skips it.
			res, err := s.Allocate(t.Context(), admin, store.AllocateRequest{Name: "web1", AgentName: "juju-1"})
			switch tc.want {
			case store.StateDeployed:
				if err != nil || res.Created || res.Token != "" || res.Machine.State != store.StateDeployed {
					t.Errorf("re-allocate by creator = %+v, %v; want the no-op", res, err)
				}
				_, err = s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "web1", AgentName: "juju-1"})
				wantCode(t, err, store.CodeAllocated)
				_, err = s.Allocate(t.Context(), admin, store.AllocateRequest{AgentName: "juju-1"})
				wantCode(t, err, store.CodeNoAvailableMachine)
			case store.StateReady:
				if err != nil || !res.Created {
					t.Errorf("allocate READY machine = %+v, %v", res, err)
				}
			default:
				wantCode(t, err, store.CodeNoAvailableMachine)
			}
		})
	}
}

// step is one move in a lifecycle path. ActionAllocate goes through Allocate
// (by name, agent "juju"), everything else through Transition.
type step struct {
	actor  store.Actor
	action store.Action
	reason string
	image  string
	want   store.State
}

func TestTransitionPaths(t *testing.T) {
	sys := store.System
	tests := map[string]struct {
		created   store.State
		steps     []step
		wantOwner string
	}{
		"commission": {store.StateNew, []step{
			{admin, store.ActionCommission, "first boot", "", store.StateCommissioning},
			{sys, store.ActionCommissioningDone, "inventory received", "", store.StateReady},
		}, ""},
		"commissioning fails and is retried": {store.StateNew, []step{
			{admin, store.ActionCommission, "", "", store.StateCommissioning},
			{sys, store.ActionCommissioningFailed, "no disks", "", store.StateFailedCommissioning},
			{admin, store.ActionCommission, "disk replaced", "", store.StateCommissioning},
			{sys, store.ActionCommissioningDone, "", "", store.StateReady},
		}, ""},
		"re-commission a READY machine": {store.StateReady, []step{
			{admin, store.ActionCommission, "new RAM", "", store.StateCommissioning},
			{sys, store.ActionCommissioningDone, "", "", store.StateReady},
		}, ""},
		"owner deploys and releases": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{alice, store.ActionDeploy, "web tier", "jammy", store.StateDeploying},
			{sys, store.ActionDeploymentDone, "", "", store.StateDeployed},
			{alice, store.ActionRelease, "done with it", "", store.StateReleasing},
			{sys, store.ActionReleaseDone, "powered off", "", store.StateReady},
		}, ""},
		"owner retries a failed deployment": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{alice, store.ActionDeploy, "", "jammy", store.StateDeploying},
			{sys, store.ActionDeploymentFailed, "curtin failed", "", store.StateFailedDeployment},
			{alice, store.ActionDeploy, "second try", "", store.StateDeploying},
			{sys, store.ActionDeploymentDone, "", "", store.StateDeployed},
		}, "alice"},
		"owner releases a failed deployment": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{alice, store.ActionDeploy, "", "debian", store.StateDeploying},
			{sys, store.ActionDeploymentFailed, "", "", store.StateFailedDeployment},
			{alice, store.ActionRelease, "", "", store.StateReleasing},
		}, ""},
		"admin releases someone's machine": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{admin, store.ActionRelease, "reclaimed", "", store.StateReleasing},
		}, ""},
		"admin deploys someone's machine": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{admin, store.ActionDeploy, "", "noble", store.StateDeploying},
		}, "alice"},
		"broken and fixed": {store.StateReady, []step{
			{admin, store.ActionMarkBroken, "fan", "", store.StateBroken},
			{admin, store.ActionMarkFixed, "fan replaced", "", store.StateReady},
		}, ""},
		"broken while deployed keeps its owner": {store.StateReady, []step{
			{alice, store.ActionAllocate, "", "", store.StateAllocated},
			{alice, store.ActionDeploy, "", "debian", store.StateDeploying},
			{sys, store.ActionDeploymentDone, "", "", store.StateDeployed},
			{admin, store.ActionMarkBroken, "PSU", "", store.StateBroken},
		}, "alice"},
		"uncommissioned machine is fixed to NEW": {store.StateNew, []step{
			{admin, store.ActionMarkBroken, "", "", store.StateBroken},
			{admin, store.ActionMarkFixed, "", "", store.StateNew},
		}, ""},
		"retired": {store.StateNew, []step{
			{admin, store.ActionRetire, "end of life", "", store.StateRetired},
		}, ""},
		"retired machine found broken": {store.StateReady, []step{
			{admin, store.ActionRetire, "", "", store.StateRetired},
			{admin, store.ActionMarkBroken, "", "", store.StateBroken},
			{admin, store.ActionRetire, "", "", store.StateRetired},
		}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			storetest.DeployImages(t, s, "amd64", "noble", "jammy", "debian")
			m := create(t, s, store.NewMachine{Hostname: "web1", State: tc.created, Power: manual})
			var got store.Machine
			for i, st := range tc.steps {
				if st.action == store.ActionAllocate {
					got = allocate(t, s, st.actor, "web1", "juju").Machine
				} else {
					var err error
					got, err = s.Transition(t.Context(), st.actor, store.TransitionRequest{
						Machine: m.Hostname, Action: st.action, Reason: st.reason, Image: st.image})
					if err != nil {
						t.Fatalf("step %d: %s %s: %v", i, st.actor.Name, st.action, err)
					}
				}
				if got.State != st.want {
					t.Fatalf("step %d: %s led to %s, want %s", i, st.action, got.State, st.want)
				}
				stored, err := s.Machine(m.ID)
				if err != nil || !reflect.DeepEqual(stored, got) {
					t.Fatalf("step %d: returned %+v\nbut stored %+v (%v)", i, got, stored, err)
				}
			}
			if got.Owner != tc.wantOwner {
				t.Errorf("owner %q at the end, want %q", got.Owner, tc.wantOwner)
			}
			ev, err := s.Events(m.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ev) != len(tc.steps)+1 {
				t.Fatalf("%d events, want create + %d steps: %+v", len(ev), len(tc.steps), ev)
			}
			from := tc.created
			if from == "" {
				from = store.StateNew
			}
			for i, st := range tc.steps {
				e := ev[i+1]
				reason := st.reason
				switch {
				case st.action == store.ActionAllocate:
					reason = `agent_name "juju"`
				case st.image != "" && reason != "":
					reason = "image " + st.image + "; " + reason
				case st.image != "":
					reason = "image " + st.image
				}
				if st.action == store.ActionDeploy {
					// The deployment's identity, by counts only.
					if !deployIdentityRE.MatchString(e.Reason) {
						t.Errorf("event %d: reason %q does not end with the deployment's identity", i+1, e.Reason)
					}
					reason = strings.TrimPrefix(reason+"; "+deployIdentityRE.FindString(e.Reason), "; ")
				}
				want := store.Event{Seq: e.Seq, Time: e.Time, Machine: m.ID, Actor: st.actor.Name,
					Action: string(st.action), From: from, To: st.want, Reason: reason}
				if e != want {
					t.Errorf("event %d = %+v\nwant %+v", i+1, e, want)
				}
				if e.Seq <= ev[i].Seq {
					t.Errorf("event %d: seq %d after %d", i+1, e.Seq, ev[i].Seq)
				}
				from = st.want
			}
			if last, _ := s.Events(m.ID, 1); len(last) != 1 || last[0] != ev[len(ev)-1] {
				t.Errorf("Events(limit 1) = %+v, want the newest %+v", last, ev[len(ev)-1])
			}
		})
	}
}

func TestTransitionPermissions(t *testing.T) {
	// Every case starts from: "mine" allocated by alice, "bobs" allocated by
	// bob, "free" READY and unheld, "new" NEW.
	tests := map[string]struct {
		actor   store.Actor
		machine string
		action  store.Action
		code    store.Code // "" for success
		message string
	}{
		"owner deploys":            {alice, "mine", store.ActionDeploy, "", ""},
		"owner releases":           {alice, "mine", store.ActionRelease, "", ""},
		"admin deploys another's":  {admin, "bobs", store.ActionDeploy, "", ""},
		"admin releases another's": {admin, "bobs", store.ActionRelease, "", ""},
		"system marks broken":      {store.System, "mine", store.ActionMarkBroken, "", ""},
		"deploy another's":         {alice, "bobs", store.ActionDeploy, store.CodeForbidden, "machine bobs is not yours"},
		"release another's":        {alice, "bobs", store.ActionRelease, store.CodeForbidden, "machine bobs is not yours"},
		"deploy an unheld machine": {alice, "free", store.ActionDeploy, store.CodeForbidden, "not yours"},
		// Nothing to release: the lifecycle's refusal, not one of rights.
		"release an unheld machine":   {alice, "free", store.ActionRelease, store.CodeInvalidTransition, "cannot release a machine that is READY"},
		"commission":                  {alice, "new", store.ActionCommission, store.CodeForbidden, "only an admin may commission"},
		"mark own machine broken":     {alice, "mine", store.ActionMarkBroken, store.CodeForbidden, "only an admin may mark-broken"},
		"retire":                      {alice, "free", store.ActionRetire, store.CodeForbidden, "only an admin"},
		"claim own deployment done":   {alice, "mine", store.ActionDeploymentDone, store.CodeForbidden, "only an admin"},
		"owner named like an admin":   {store.Actor{Name: "admin"}, "new", store.ActionCommission, store.CodeForbidden, "only an admin"},
		"owner finishes a release":    {bob, "bobs", store.ActionReleaseDone, store.CodeForbidden, "only an admin"},
		"admin, invalid transition":   {admin, "new", store.ActionDeploy, store.CodeInvalidTransition, "NEW -> DEPLOYING"},
		"unknown machine":             {admin, "nope", store.ActionDeploy, store.CodeNotFound, `"nope" not found`},
		"allocate through Transition": {admin, "free", store.ActionAllocate, store.CodeInvalid, "use Allocate"},
		"unknown action":              {admin, "free", "explode", store.CodeInvalid, `unknown action "explode"`},
		"non-admin, unknown machine":  {alice, "nope", store.ActionDeploy, store.CodeNotFound, "not found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			for _, h := range []string{"mine", "bobs", "free"} {
				ready(t, s, h)
			}
			create(t, s, store.NewMachine{Hostname: "new"})
			allocate(t, s, alice, "mine", "a")
			allocate(t, s, bob, "bobs", "b")
			storetest.DeployImages(t, s, "amd64", "debian")
			before := snap(t, s)
			req := store.TransitionRequest{Machine: tc.machine, Action: tc.action}
			if tc.action == store.ActionDeploy {
				req.Image = "debian"
			}
			m, err := s.Transition(t.Context(), tc.actor, req)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				ev, _ := s.Events(m.ID, 1)
				if len(ev) != 1 || ev[0].Actor != tc.actor.Name || ev[0].Action != string(tc.action) {
					t.Errorf("last event %+v, want %s by %s", ev, tc.action, tc.actor.Name)
				}
				return
			}
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not say %q", err, tc.message)
			}
			if m.ID != "" {
				t.Errorf("a refusal returned machine %+v", m)
			}
			before.mustEqual(t, snap(t, s))
		})
	}
}

func TestTransitionInvalid(t *testing.T) {
	tests := map[string]struct {
		created store.State
		action  store.Action
		message string
	}{
		"deploy a NEW machine":       {store.StateNew, store.ActionDeploy, "machine web1: cannot deploy a machine that is NEW: NEW -> DEPLOYING is not allowed"},
		"release a READY machine":    {store.StateReady, store.ActionRelease, "machine web1: cannot release a machine that is READY: READY -> RELEASING is not allowed"},
		"retire a DEPLOYED machine":  {store.StateDeployed, store.ActionRetire, "machine web1: cannot retire a machine that is DEPLOYED: DEPLOYED -> RETIRED is not allowed"},
		"fix a machine that is fine": {store.StateReady, store.ActionMarkFixed, "machine web1: cannot mark-fixed a machine that is READY: READY -> READY is not allowed"},
		"finish an idle release":     {store.StateDeployed, store.ActionReleaseDone, "machine web1: cannot release-done a machine that is DEPLOYED: DEPLOYED -> READY is not allowed"},
		"commission a DEPLOYED one":  {store.StateDeployed, store.ActionCommission, "machine web1: cannot commission a machine that is DEPLOYED: DEPLOYED -> COMMISSIONING is not allowed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := storetest.New(t)
			create(t, s, store.NewMachine{Hostname: "web1", State: tc.created})
			before := snap(t, s)
			_, err := s.Transition(t.Context(), admin, store.TransitionRequest{Machine: "web1", Action: tc.action, Reason: "try"})
			wantCode(t, err, store.CodeInvalidTransition)
			if err.Error() != tc.message {
				t.Errorf("error %q\nwant  %q", err, tc.message)
			}
			before.mustEqual(t, snap(t, s))
		})
	}
}

// A machine that broke while allocated keeps its owner while BROKEN (so that
// a human sees whose it was), cannot be handed over, and mark-fixed ends the
// allocation: it comes back READY, unheld, and its old token is worthless.
func TestMarkFixedEndsAllocation(t *testing.T) {
	s := storetest.New(t)
	ready(t, s, "web1")
	res := allocate(t, s, alice, "web1", "juju")
	m := transition(t, s, admin, "web1", store.ActionMarkBroken)
	if m.State != store.StateBroken || m.Owner != "alice" || m.AgentName != "juju" {
		t.Fatalf("broken machine %s owner %q agent %q, want BROKEN alice juju", m.State, m.Owner, m.AgentName)
	}
	_, err := s.Allocate(t.Context(), bob, store.AllocateRequest{Name: "web1", AgentName: "x", Token: res.Token})
	wantCode(t, err, store.CodeAllocated)
	_, err = s.Allocate(t.Context(), alice, store.AllocateRequest{Name: "web1", AgentName: "juju"})
	wantCode(t, err, store.CodeAllocated)
	_, err = s.Allocate(t.Context(), alice, store.AllocateRequest{AgentName: "juju"})
	wantCode(t, err, store.CodeNoAvailableMachine)

	m = transition(t, s, admin, "web1", store.ActionMarkFixed)
	if m.State != store.StateReady || m.Owner != "" || m.AgentName != "" {
		t.Fatalf("fixed machine %s owner %q agent %q, want READY and unheld", m.State, m.Owner, m.AgentName)
	}
	if held, _ := s.ListMachines(store.Filter{Owner: "alice"}); len(held) != 0 {
		t.Errorf("alice still holds %+v", held)
	}
	got, err := s.Allocate(t.Context(), bob, store.AllocateRequest{AgentName: "x", Token: res.Token})
	if err != nil || !got.Created || got.Adopted || got.Machine.Owner != "bob" || got.Token == res.Token {
		t.Errorf("allocating the fixed machine = %+v, %v; want a new allocation for bob", got, err)
	}
}

func TestExpire(t *testing.T) {
	t0 := time.Date(2025, 5, 1, 7, 36, 0, 0, time.UTC)
	const timeout = time.Hour
	// Machine name -> minutes since it entered its state, at the check.
	type expect struct {
		created store.State
		actions []store.Action
		age     time.Duration
	}
	machines := map[string]expect{
		"c-old":   {store.StateNew, []store.Action{store.ActionCommission}, 61 * time.Minute},
		"c-limit": {store.StateNew, []store.Action{store.ActionCommission}, timeout},
		"c-young": {store.StateNew, []store.Action{store.ActionCommission}, 5 * time.Minute},
		"d-old":   {store.StateReady, []store.Action{store.ActionAllocate, store.ActionDeploy}, 3 * time.Hour},
		"d-young": {store.StateReady, []store.Action{store.ActionAllocate, store.ActionDeploy}, 59 * time.Minute},
		"r-old":   {store.StateReady, nil, 10 * time.Hour},
		"a-old":   {store.StateReady, []store.Action{store.ActionAllocate}, 10 * time.Hour},
		"dd-old":  {store.StateDeployed, nil, 10 * time.Hour},
		// Releases whose power-off never showed (manual power: nothing
		// runs the queue in this test).
		"rel-old":   {store.StateReady, []store.Action{store.ActionAllocate, store.ActionRelease}, 61 * time.Minute},
		"rel-young": {store.StateReady, []store.Action{store.ActionAllocate, store.ActionRelease}, 5 * time.Minute},
	}
	tests := map[string]struct {
		commissioning, deploying time.Duration
		expired                  map[string]store.State
		releasing                time.Duration
	}{
		"releasing":              {0, 0, map[string]store.State{"rel-old": store.StateBroken}, timeout},
		"both":                   {timeout, timeout, map[string]store.State{"c-old": store.StateFailedCommissioning, "d-old": store.StateFailedDeployment}, 0},
		"commissioning disabled": {0, timeout, map[string]store.State{"d-old": store.StateFailedDeployment}, 0},
		"deploying disabled":     {timeout, 0, map[string]store.State{"c-old": store.StateFailedCommissioning}, 0},
		"both disabled":          {0, 0, nil, 0},
		"short timeouts":         {time.Minute, time.Minute, map[string]store.State{"c-old": store.StateFailedCommissioning, "c-limit": store.StateFailedCommissioning, "c-young": store.StateFailedCommissioning, "d-old": store.StateFailedDeployment, "d-young": store.StateFailedDeployment}, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var (
				mu  sync.Mutex
				now = t0
			)
			setNow := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
			s := storetest.New(t, func(o *store.Options) {
				o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			})
			check := t0.Add(24 * time.Hour)
			for host, e := range machines {
				setNow(check.Add(-e.age))
				create(t, s, store.NewMachine{Hostname: host, State: e.created, Power: manual})
				for _, a := range e.actions {
					if a == store.ActionAllocate {
						allocate(t, s, alice, host, "juju")
					} else {
						transition(t, s, admin, host, a)
					}
				}
			}
			setNow(check)
			before := map[string]store.Machine{}
			for host := range machines {
				before[host], _ = s.Machine(host)
			}
			got, err := s.Expire(t.Context(), store.Timeouts{Commissioning: tc.commissioning, Deploying: tc.deploying, Releasing: tc.releasing})
			if err != nil {
				t.Fatal(err)
			}
			gotStates := map[string]store.State{}
			for _, e := range got {
				gotStates[e.Machine.Hostname] = e.Machine.State
				// The state it left and that state's phase come with it.
				wantPhase := map[store.State]string{store.StateCommissioning: store.PhaseCommission,
					store.StateDeploying: store.PhaseDeploy}[before[e.Machine.Hostname].State]
				if e.From != before[e.Machine.Hostname].State || e.Phase != wantPhase {
					t.Errorf("%s expired from %s (phase %q); want from %s (phase %q)",
						e.Machine.Hostname, e.From, e.Phase, before[e.Machine.Hostname].State, wantPhase)
				}
			}
			if len(gotStates) != len(tc.expired) || (len(tc.expired) > 0 && !reflect.DeepEqual(gotStates, tc.expired)) {
				t.Errorf("expired %v, want %v", gotStates, tc.expired)
			}
			for host := range machines {
				m, err := s.Machine(host)
				if err != nil {
					t.Fatal(err)
				}
				want, ok := tc.expired[host]
				if !ok {
					if !reflect.DeepEqual(m, before[host]) {
						t.Errorf("%s was changed: %+v -> %+v", host, before[host], m)
					}
					continue
				}
				if m.State != want || !m.StateSince.Equal(check) || m.Owner != before[host].Owner {
					t.Errorf("%s: %s since %s owner %q; want %s since %s owner %q",
						host, m.State, m.StateSince, m.Owner, want, check, before[host].Owner)
				}
				ev, _ := s.Events(host, 1)
				if len(ev) != 1 || ev[0].Actor != "rackd/watchdog" || ev[0].To != want ||
					ev[0].From != before[host].State || !strings.HasPrefix(ev[0].Reason, "timeout:") {
					t.Errorf("%s: last event %+v, want a watchdog timeout", host, ev)
				}
				if want == store.StateBroken && (ev[0].Action != string(store.ActionReleaseFailed) ||
					!regexp.MustCompile(`^timeout: the release did not see the machine powered off within 1h0m0s \(power request pr-\d+ off still pending\)$`).MatchString(ev[0].Reason)) {
					t.Errorf("%s: %+v, want release-failed saying what the release waited for", host, ev[0])
				}
			}
			// A second pass finds nothing more to do.
			if again, err := s.Expire(t.Context(), store.Timeouts{Commissioning: tc.commissioning, Deploying: tc.deploying}); err != nil || len(again) != 0 {
				t.Errorf("second Expire = %+v, %v; want nothing", again, err)
			}
		})
	}
}

func TestListMachines(t *testing.T) {
	s := storetest.New(t)
	for _, h := range []string{"c", "a", "b", "d"} {
		ready(t, s, h)
	}
	create(t, s, store.NewMachine{Hostname: "e"})
	allocate(t, s, alice, "b", "juju")
	allocate(t, s, alice, "d", "other")
	allocate(t, s, bob, "c", "juju")
	tests := map[string]struct {
		filter store.Filter
		want   string
	}{
		"all":                {store.Filter{}, "a b c d e"},
		"state":              {store.Filter{State: store.StateAllocated}, "b c d"},
		"owner":              {store.Filter{Owner: "alice"}, "b d"},
		"agent":              {store.Filter{AgentName: "juju"}, "b c"},
		"owner and agent":    {store.Filter{Owner: "alice", AgentName: "juju"}, "b"},
		"state NEW":          {store.Filter{State: store.StateNew}, "e"},
		"nobody":             {store.Filter{Owner: "carol"}, ""},
		"owner, bad state":   {store.Filter{Owner: "alice", State: store.StateReady}, ""},
		"state READY only a": {store.Filter{State: store.StateReady}, "a"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ms, err := s.ListMachines(tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range ms {
				names = append(names, m.Hostname)
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("ListMachines(%+v) = %q, want %q", tc.filter, got, tc.want)
			}
		})
	}
	counts, err := s.CountByState()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[store.State]int{store.StateReady: 1, store.StateAllocated: 3, store.StateNew: 1}; !reflect.DeepEqual(counts, want) {
		t.Errorf("CountByState = %v, want %v", counts, want)
	}
}

// TestCurrentImage: a machine shows the image it deploys or runs only
// while a deploy of the allocation holding it is under way, done or
// failed; not before its holder deploys (the image of a deploy aborted, or
// of the last user's, is no image it runs) and not once released.
func TestCurrentImage(t *testing.T) {
	for _, c := range []struct {
		state store.State
		owner string
		want  string
	}{
		{store.StateReady, "", ""},
		{store.StateAllocated, "alice", ""},
		{store.StateDeploying, "alice", "bookworm"},
		{store.StateDeployed, "alice", "bookworm"},
		{store.StateFailedDeployment, "alice", "bookworm"},
		{store.StateBroken, "alice", "bookworm"},
		{store.StateBroken, "", ""},
		{store.StateReleasing, "", ""},
	} {
		m := store.Machine{State: c.state, Owner: c.owner, DeployImage: "bookworm"}
		if got := m.CurrentImage(); got != c.want {
			t.Errorf("%s owned by %q: CurrentImage %q, want %q", c.state, c.owner, got, c.want)
		}
	}
}
