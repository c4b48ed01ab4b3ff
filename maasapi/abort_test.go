package maasapi

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"rackd/store"
	"rackd/store/storetest"
)

// TestAbort: MAAS's op=abort is rackd's abort with MAAS's rights (who may
// edit the machine: a deployment's owner, an admin) and refusals (a
// commissioning, a deployment or a disk erasing; anything else, a plain
// release too, is MAAS's 409).
func TestAbort(t *testing.T) {
	ctx := context.Background()
	ts := newTestServer(t)
	adminKey, _ := ts.key(t, "root", true)
	alice, _ := ts.key(t, "alice", false)
	storetest.DeployImages(t, ts.st, "amd64", "bookworm")
	abort := func(key string, m store.Machine, wantStatus int, want string) {
		t.Helper()
		st, body := ts.maas(t, key, "POST", "machines/"+m.ID+"/?op=abort", url.Values{"comment": {"stuck"}})
		if st != wantStatus {
			t.Fatalf("abort %s: %d %s, want %d", m.Hostname, st, body, wantStatus)
		}
		if st == 200 {
			if name := decodeMachine(t, body)["status_name"]; name != want {
				t.Fatalf("abort %s: status %v, want %s", m.Hostname, name, want)
			}
		} else if !strings.Contains(body, want) {
			t.Fatalf("abort %s: %q, want it to say %q", m.Hostname, body, want)
		}
	}

	com := ts.readyMachine(t, "com", "52:54:00:00:00:01")
	if _, err := ts.st.Transition(ctx, store.System, store.TransitionRequest{Machine: com.ID, Action: store.ActionCommission, Running: true}); err != nil {
		t.Fatal(err)
	}
	abort(alice, com, 403, "only an admin may abort its commissioning")
	abort(adminKey, com, 200, "Ready") // commissioned before: its hardware is known
	abort(adminKey, com, 409, "Cannot abort in current state: machine com is Ready")

	dep := ts.readyMachine(t, "dep", "52:54:00:00:00:02")
	if st, body := ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"dep"}}); st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	if _, err := ts.st.Deploy(ctx, store.Actor{Name: "alice"}, store.DeployRequest{Machine: dep.ID, Image: "bookworm"}); err != nil {
		t.Fatal(err)
	}
	bob, _ := ts.key(t, "bob", false)
	abort(bob, dep, 404, "") // another user's held machine does not exist for bob
	abort(alice, dep, 200, "Allocated")
	if m, _ := ts.st.Machine(dep.ID); m.Owner != "alice" || m.Credential != nil {
		t.Fatalf("after the abort: owner %q credential %v", m.Owner, m.Credential)
	}

	// A plain release is not MAAS's to abort; /api/v1's abort stops it.
	if _, err := ts.st.Release(ctx, store.Actor{Name: "alice"}, dep.ID, ""); err != nil {
		t.Fatal(err)
	}
	abort(adminKey, dep, 409, "Cannot abort in current state: machine dep is Releasing")

	// A disk erasing is: the machine is Broken, not handed on unerased.
	ers, err := ts.st.CreateMachine(ctx, store.System, store.NewMachine{Hostname: "ers", Arch: "amd64", MACs: []string{"52:54:00:00:00:03"},
		State: store.StateReady, Power: store.PowerParams{Driver: "fake", Address: "bmc3"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, body := ts.maas(t, alice, "POST", "machines/?op=allocate", url.Values{"name": {"ers"}}); st != 200 {
		t.Fatalf("allocate: %d %s", st, body)
	}
	if _, err := ts.st.StartRelease(ctx, store.Actor{Name: "alice"}, ers.ID, "", true); err != nil {
		t.Fatal(err)
	}
	abort(alice, ers, 403, "only an admin may abort its erase")
	abort(adminKey, ers, 200, "Broken")
}
