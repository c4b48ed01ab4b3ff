package store_test

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"rackd/power"
	"rackd/store"
	"rackd/store/storetest"
)

// deployIdentityRE is how a deploy event describes the deployment: counts
// and sizes, never the user-data.
var deployIdentityRE = regexp.MustCompile(`instance i-[0-9a-f]{16}, \d+ ssh keys?(, \d+ bytes of user-data)?$`)

// withUser creates a (non-admin) user and returns its actor.
func withUser(t testing.TB, s *store.Store, name string) store.Actor {
	t.Helper()
	if _, _, err := s.CreateUser(context.Background(), admin, name, false, ""); err != nil {
		t.Fatalf("create user %s: %v", name, err)
	}
	return store.Actor{Name: name}
}

// addKey gives user a fresh ed25519 key and returns its canonical line.
func addKey(t testing.TB, s *store.Store, user store.Actor, comment string) string {
	t.Helper()
	k, err := s.AddSSHKey(context.Background(), user, user.Name, storetest.SSHKey(t, "ed25519", 0, comment))
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// deployed takes a machine, allocated by owner, into DEPLOYING with the
// request's identity.
func deploy(t testing.TB, s *store.Store, owner store.Actor, host string, req store.DeployRequest) store.Machine {
	t.Helper()
	req.Machine = host
	if req.Image == "" {
		req.Image = "debian"
	}
	storetest.DeployImages(t, s, "amd64", req.Image)
	m, err := s.Deploy(context.Background(), owner, req)
	if err != nil {
		t.Fatalf("deploy %s: %v", host, err)
	}
	return m
}

func eventsOf(t testing.TB, s *store.Store, id string) []store.Event {
	t.Helper()
	ev, err := s.Events(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func hasEvent(evs []store.Event, action, reasonPrefix string) bool {
	for _, e := range evs {
		if e.Action == action && strings.HasPrefix(e.Reason, reasonPrefix) {
			return true
		}
	}
	return false
}

// TestDeploymentFlow walks one deployment from the deploy request to the
// OS's report and the release, checking who may see what on the way.
func TestDeploymentFlow(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	alice := withUser(t, s, "alice")
	bob := withUser(t, s, "bob")
	aliceKey := addKey(t, s, alice, "alice@laptop")
	extra := storetest.SSHKey(t, "ecdsa", 256, "ci robot")
	ready(t, s, "web1")
	allocate(t, s, alice, "web1", "juju")
	userData := []byte("#cloud-config\nruncmd: [touch /root/SECRET-MARKER]\n")

	m := deploy(t, s, alice, "web1", store.DeployRequest{UserData: userData,
		// The owner's own key again is not repeated.
		SSHKeys: []string{extra, aliceKey}})
	if m.State != store.StateDeploying || !m.DiskWritten.IsZero() {
		t.Fatalf("after deploy: %+v", m)
	}
	d, err := s.DeploymentOf(alice, "web1")
	if err != nil {
		t.Fatal(err)
	}
	wantExtra, _ := store.ParseSSHKey(extra)
	if !strings.HasPrefix(d.InstanceID, "i-") || d.Owner != "alice" || d.Image != "debian" ||
		d.UserDataBytes != len(userData) || len(d.SSHKeys) != 2 || d.SSHKeys[0] != aliceKey || d.SSHKeys[1] != wantExtra.Key {
		t.Fatalf("deployment %+v", d)
	}
	if _, err := s.DeploymentOf(admin, "web1"); err != nil {
		t.Errorf("admin reads the deployment: %v", err)
	}
	_, err = s.DeploymentOf(bob, "web1")
	wantCode(t, err, store.CodeForbidden)
	if got, err := s.UserData(alice, m.ID); err != nil || !bytes.Equal(got, userData) {
		t.Fatalf("owner's user-data %q, %v", got, err)
	}
	_, err = s.UserData(bob, m.ID)
	wantCode(t, err, store.CodeForbidden)
	_, err = s.UserData(store.Actor{}, m.ID)
	wantCode(t, err, store.CodeForbidden)
	evs := eventsOf(t, s, m.ID)
	last := evs[len(evs)-1]
	if last.Action != "deploy" || !deployIdentityRE.MatchString(last.Reason) || strings.Contains(last.Reason, "SECRET") {
		t.Fatalf("deploy event %+v", last)
	}

	// The deploy environment fetches the seed with its phase credential.
	phase := s.PhaseToken(m)
	_, err = s.Seed(context.Background(), "not-a-token")
	wantCode(t, err, store.CodeUnauthorized)
	_, err = s.Seed(context.Background(), "")
	wantCode(t, err, store.CodeUnauthorized)
	src, err := s.Seed(context.Background(), phase)
	if err != nil {
		t.Fatal(err)
	}
	if src.Machine.ID != m.ID || src.Deployment.InstanceID != d.InstanceID || !bytes.Equal(src.UserData, userData) ||
		!strings.HasPrefix(src.OSToken, m.ID+".") || store.HashToken(src.OSToken) != d.OSHash {
		t.Fatalf("seed source %+v", src)
	}
	osTok := src.OSToken
	if !hasEvent(eventsOf(t, s, m.ID), "deploy-progress", "seed of instance "+d.InstanceID+" fetched") || src.Deployment.SeedServed.IsZero() {
		t.Fatalf("the seed's fetch is not recorded: %+v", src.Deployment)
	}
	// A second fetch (a retry) serves the same seed and records nothing.
	n := len(eventsOf(t, s, m.ID))
	if again, err := s.Seed(context.Background(), phase); err != nil || again.OSToken != osTok || len(eventsOf(t, s, m.ID)) != n {
		t.Fatalf("second fetch: %v", err)
	}

	// Before the image is written the OS cannot report cloud-init errors
	// with another token.
	_, err = s.OSEvent(ctx, store.OSEventReport{Token: m.ID + ".forged", Result: "FAIL", Name: "x"})
	wantCode(t, err, store.CodeForbidden)

	// The image written: DEPLOYING still, booting its disk.
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: phase,
		Bytes: 2_147_483_648, WriteTime: 380 * time.Millisecond, Detail: "2147483648 bytes to vda, sha256 ab"})
	if err != nil || !res.DiskWritten || res.Action != "" || res.Machine.State != store.StateDeploying || res.Machine.DiskWritten.IsZero() {
		t.Fatalf("deployed report: %+v %v", res, err)
	}
	evs = eventsOf(t, s, m.ID)
	if !hasEvent(evs, "deploy-progress", "image written (2147 MB in 0.38 s; power-on and boot before it: ") || !hasEvent(evs, "deploy-progress", "rebooting to disk") {
		t.Fatalf("events after the image was written: %+v", evs)
	}
	if got := store.NextBootFor(res.Machine, store.PowerCycle); got != power.BootNone {
		t.Errorf("next boot of a DEPLOYING machine whose image is written: %s, want its disk (none)", got)
	}
	// The same report again is a replay; the seed is not served again.
	again, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: phase})
	if err != nil || again.Action != "" || again.DiskWritten {
		t.Fatalf("replayed deployed report: %+v %v", again, err)
	}
	_, err = s.Seed(context.Background(), phase)
	wantCode(t, err, store.CodeConflict)

	// cloud-init's webhook: successes are dropped, failures kept.
	kept, err := s.OSEvent(ctx, store.OSEventReport{Token: osTok, Name: "init-local", EventType: "finish", Result: "SUCCESS"})
	if err != nil || kept {
		t.Fatalf("success event kept=%t %v", kept, err)
	}
	kept, err = s.OSEvent(ctx, store.OSEventReport{Token: osTok, Name: "modules-final/config-scripts-user",
		Description: "running config-scripts-user\nwith frequency once-per-instance", EventType: "finish", Result: "FAIL"})
	if err != nil || !kept {
		t.Fatalf("failure event kept=%t %v", kept, err)
	}
	if !hasEvent(eventsOf(t, s, m.ID), "os-error", "cloud-init FAIL: modules-final/config-scripts-user: running config-scripts-user with frequency") {
		t.Fatalf("no os-error event: %+v", eventsOf(t, s, m.ID))
	}

	// The OS phones home: DEPLOYED.
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: m.ID + ".forged", Source: "10.0.0.9"})
	wantCode(t, err, store.CodeForbidden)
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: "garbage", Source: "10.0.0.9"})
	wantCode(t, err, store.CodeForbidden)
	ph, err := s.OSPhoneHome(ctx, store.PhoneHome{Token: osTok, InstanceID: d.InstanceID, Source: "10.0.0.5"})
	if err != nil || ph.Action != store.ActionDeploymentDone || ph.Machine.State != store.StateDeployed || !ph.Machine.DiskWritten.IsZero() {
		t.Fatalf("phone-home: %+v %v", ph, err)
	}
	evs = eventsOf(t, s, m.ID)
	if e := evs[len(evs)-1]; e.Action != string(store.ActionDeploymentDone) || !strings.HasPrefix(e.Reason, "OS booted, cloud-init finished (") || e.To != store.StateDeployed {
		t.Fatalf("DEPLOYED event %+v", e)
	}
	// A replay is refused, and the machine says so.
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: osTok, Source: "10.0.0.66"})
	wantCode(t, err, store.CodeConflict)
	if !hasEvent(eventsOf(t, s, m.ID), "os-report-refused", "phone-home from 10.0.0.66 refused: the OS already reported") {
		t.Fatalf("no event for the replay: %+v", eventsOf(t, s, m.ID))
	}
	d, _ = s.DeploymentOf(alice, m.ID)
	if d.ImageWritten.IsZero() || d.OSBooted.IsZero() || len(d.OSErrors) != 1 || d.OSErrors[0].Result != "FAIL" {
		t.Fatalf("deployment at the end %+v", d)
	}
	for _, e := range eventsOf(t, s, m.ID) {
		if strings.Contains(e.Reason, "SECRET") {
			t.Fatalf("user-data in an event: %+v", e)
		}
	}

	// Release: the record, the user-data and the OS credential are gone.
	if _, err := s.Release(ctx, alice, m.ID, ""); err != nil {
		t.Fatal(err)
	}
	_, err = s.DeploymentOf(alice, m.ID)
	wantCode(t, err, store.CodeNotFound)
	_, err = s.UserData(admin, m.ID)
	wantCode(t, err, store.CodeNotFound)
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: osTok})
	wantCode(t, err, store.CodeForbidden)
	_, err = s.OSEvent(ctx, store.OSEventReport{Token: osTok, Result: "FAIL", Name: "late"})
	wantCode(t, err, store.CodeForbidden)
}

// TestRedeploy: each deployment has its own instance-id and credential,
// and a new owner's gets that owner's keys only.
func TestRedeploy(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	alice := withUser(t, s, "alice")
	bob := withUser(t, s, "bob")
	aliceKey := addKey(t, s, alice, "alice")
	bobKey := addKey(t, s, bob, "bob")
	ready(t, s, "r1")
	allocate(t, s, alice, "r1", "a")
	m := deploy(t, s, alice, "r1", store.DeployRequest{UserData: []byte("alice's")})
	first, _ := s.Seed(context.Background(), s.PhaseToken(m))
	// The deploy environment fails; alice retries: a new deployment.
	if _, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m), Error: "disk too small"}); err != nil {
		t.Fatal(err)
	}
	m = deploy(t, s, alice, "r1", store.DeployRequest{})
	retry, err := s.Seed(context.Background(), s.PhaseToken(m))
	if err != nil {
		t.Fatal(err)
	}
	if retry.Deployment.InstanceID == first.Deployment.InstanceID || retry.OSToken == first.OSToken || len(retry.UserData) != 0 {
		t.Fatalf("retry kept the first deployment's identity: %+v vs %+v", retry.Deployment, first.Deployment)
	}
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: first.OSToken})
	wantCode(t, err, store.CodeForbidden)

	// Failed again, released, then bob's.
	if _, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m), Error: "still too small"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, alice, m.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition(ctx, store.System, store.TransitionRequest{Machine: m.ID, Action: store.ActionReleaseDone}); err != nil {
		t.Fatal(err)
	}
	allocate(t, s, bob, "r1", "b")
	m = deploy(t, s, bob, "r1", store.DeployRequest{})
	d, err := s.DeploymentOf(bob, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.SSHKeys) != 1 || d.SSHKeys[0] != bobKey || d.SSHKeys[0] == aliceKey || d.InstanceID == retry.Deployment.InstanceID {
		t.Fatalf("bob's deployment %+v", d)
	}
	_, err = s.DeploymentOf(alice, m.ID)
	wantCode(t, err, store.CodeForbidden)
	_, err = s.OSPhoneHome(ctx, store.PhoneHome{Token: retry.OSToken})
	wantCode(t, err, store.CodeForbidden)
}

func TestDeployBadInput(t *testing.T) {
	s := storetest.New(t)
	alice := withUser(t, s, "alice")
	ready(t, s, "b1")
	allocate(t, s, alice, "b1", "a")
	before := snap(t, s)
	for name, tc := range map[string]struct {
		req  store.DeployRequest
		want string
	}{
		"user-data too large": {store.DeployRequest{UserData: make([]byte, store.MaxUserData+1)}, "user-data is 1048577 bytes"},
		"bad key":             {store.DeployRequest{SSHKeys: []string{"ssh-ed25519 AAAA"}}, "ssh_keys[0]: not a public key"},
		"private key":         {store.DeployRequest{SSHKeys: []string{storetest.SSHKey(t, "ed25519", 0, ""), "-----BEGIN OPENSSH PRIVATE KEY-----"}}, "ssh_keys[1]: this is a private key"},
		"short rsa":           {store.DeployRequest{SSHKeys: []string{storetest.SSHKey(t, "rsa", 1024, "")}}, "ssh_keys[0]: rsa key of 1024 bits"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.req.Machine, tc.req.Image = "b1", "debian"
			_, err := s.Deploy(context.Background(), alice, tc.req)
			wantCode(t, err, store.CodeInvalid)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	before.mustEqual(t, snap(t, s))
	// Exactly the bound is fine.
	deploy(t, s, alice, "b1", store.DeployRequest{UserData: make([]byte, store.MaxUserData)})
}

// TestOSNeverReports: the watchdog fails a deployment whose image was
// written and whose OS never said cloud-init finished, saying so.
func TestOSNeverReports(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := storetest.New(t, func(o *store.Options) { o.Now = clock })
	alice := withUser(t, s, "alice")
	ready(t, s, "n1")
	allocate(t, s, alice, "n1", "a")
	m := deploy(t, s, alice, "n1", store.DeployRequest{})
	src, err := s.Seed(context.Background(), s.PhaseToken(m))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m), Bytes: 1e9}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Minute)
	exp, err := s.Expire(context.Background(), store.Timeouts{Commissioning: time.Hour, Deploying: 10 * time.Minute})
	if err != nil || len(exp) != 1 || exp[0].Machine.State != store.StateFailedDeployment || exp[0].Phase != store.PhaseDeploy {
		t.Fatalf("expire: %+v %v", exp, err)
	}
	e := lastEvent(t, s, m.ID)
	want := "timeout: image written at 2026-12-01T10:02:00Z; the OS did not report that cloud-init finished within 10m0s"
	if e.Reason != want {
		t.Fatalf("reason %q\nwant   %q", e.Reason, want)
	}
	// The deployment stays for its owner to read (until the release)...
	if _, err := s.DeploymentOf(alice, m.ID); err != nil {
		t.Fatal(err)
	}
	// ...but a late phone-home does not make it DEPLOYED.
	_, err = s.OSPhoneHome(context.Background(), store.PhoneHome{Token: src.OSToken, Source: "10.0.0.5"})
	wantCode(t, err, store.CodeConflict)
	if got, _ := s.Machine(m.ID); got.State != store.StateFailedDeployment {
		t.Fatalf("late phone-home moved the machine to %s", got.State)
	}
}

func TestOSErrorsBounded(t *testing.T) {
	s := storetest.New(t)
	alice := withUser(t, s, "alice")
	ready(t, s, "e1")
	allocate(t, s, alice, "e1", "a")
	m := deploy(t, s, alice, "e1", store.DeployRequest{})
	src, err := s.Seed(context.Background(), s.PhaseToken(m))
	if err != nil {
		t.Fatal(err)
	}
	before := len(eventsOf(t, s, m.ID))
	long := strings.Repeat("x", 5000)
	for i := range 30 {
		res := "FAIL"
		if i%2 == 1 {
			res = "warn"
		}
		if _, err := s.OSEvent(context.Background(), store.OSEventReport{Token: src.OSToken, Name: long, Description: long, Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := s.DeploymentOf(alice, m.ID)
	if len(d.OSErrors) != 20 || d.OSErrorsDropped != 10 || d.OSErrors[1].Result != "WARN" {
		t.Fatalf("%d errors kept, %d dropped", len(d.OSErrors), d.OSErrorsDropped)
	}
	for _, e := range d.OSErrors {
		if len(e.Name) > 512 || len(e.Description) > 512 {
			t.Fatalf("error not bounded: %d/%d bytes", len(e.Name), len(e.Description))
		}
	}
	if n := len(eventsOf(t, s, m.ID)) - before; n != 21 {
		t.Fatalf("%d events for 30 errors, want 20 and one saying the rest are counted", n)
	}
}

// TestDeleteMachineDeletesDeployment: the user-data does not outlive its
// machine (storetest's Check at the end finds any leftover).
func TestDeleteMachineDeletesDeployment(t *testing.T) {
	s := storetest.New(t)
	alice := withUser(t, s, "alice")
	ready(t, s, "x1")
	allocate(t, s, alice, "x1", "a")
	m := deploy(t, s, alice, "x1", store.DeployRequest{UserData: []byte("data")})
	if _, err := s.DeleteMachine(context.Background(), admin, store.DeleteRequest{Machine: m.ID, Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFromSchema9: a machine DEPLOYING when rackd is upgraded has no
// deployment record; its deploy report ends its deployment as before.
func TestMigrateFromSchema9(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, store.FileName)
	s, err := store.Open(path, store.Options{CredentialKey: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	ready(t, s, "old")
	allocate(t, s, admin, "old", "a")
	m := transition(t, s, admin, "old", store.ActionDeploy)
	tok := s.PhaseToken(m)
	s.Close()
	// Back to schema 9, as an older rackd left it.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"deployments", "user_data"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("9"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s, err = store.Open(path, store.Options{CredentialKey: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatalf("open schema 9: %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("invariants after migration:\n%v", err)
	}
	if store.SchemaVersion < 10 {
		t.Fatalf("schema %d, want at least 10 (deployments)", store.SchemaVersion)
	}
	_, err = s.DeploymentOf(admin, "old")
	wantCode(t, err, store.CodeNotFound)
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: tok})
	if err != nil || res.Machine.State != store.StateDeployed || res.DiskWritten {
		t.Fatalf("deploy report of a deployment from before: %+v %v", res, err)
	}
	// A new deployment after the upgrade has its record.
	if _, err := s.Release(context.Background(), admin, m.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestDeployWithoutSeed: an environment that fetched no seed wrote an OS
// that has no credential to report with: the image written ends the
// deployment, and the event says why.
func TestDeployWithoutSeed(t *testing.T) {
	s := storetest.New(t)
	alice := withUser(t, s, "alice")
	ready(t, s, "w1")
	allocate(t, s, alice, "w1", "a")
	m := deploy(t, s, alice, "w1", store.DeployRequest{UserData: []byte("x")})
	res, err := report(s, store.PhaseReport{Machine: m.ID, Phase: store.PhaseDeploy, Token: s.PhaseToken(m)})
	if err != nil || res.Machine.State != store.StateDeployed || res.DiskWritten {
		t.Fatalf("%+v %v", res, err)
	}
	if e := lastEvent(t, s, m.ID); e.Reason != "image debian written without a seed (the OS cannot report)" {
		t.Fatalf("event %+v", e)
	}
	// The deployment (and its user-data) stay with the allocation.
	if _, err := s.UserData(alice, m.ID); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptDeployment: whoever adopts an allocation with its token gets its
// deployment too; the previous owner no longer reads it.
func TestAdoptDeployment(t *testing.T) {
	s := storetest.New(t)
	alice := withUser(t, s, "alice")
	bob := withUser(t, s, "bob")
	ready(t, s, "a1")
	res := allocate(t, s, alice, "a1", "a")
	deploy(t, s, alice, "a1", store.DeployRequest{UserData: []byte("x")})
	if _, err := s.Allocate(context.Background(), bob, store.AllocateRequest{Name: "a1", AgentName: "b", Token: res.Token}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.DeploymentOf(bob, "a1"); err != nil || d.Owner != "bob" {
		t.Fatalf("the adopter's deployment: %+v %v", d, err)
	}
	_, err := s.UserData(alice, "a1")
	wantCode(t, err, store.CodeForbidden)
}

// TestReleaseWhileDeploying: a deployment released before it ends (a
// cancelled bootstrap) loses its credentials and its user-data, and the
// machine is powered off, as a release from DEPLOYED.
func TestReleaseWhileDeploying(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	owner := withUser(t, s, "carol")
	m := create(t, s, store.NewMachine{Hostname: "web1", State: store.StateReady, Power: store.PowerParams{Driver: "fake", Address: "bmc1"}})
	allocate(t, s, owner, "web1", "juju")
	m = deploy(t, s, owner, "web1", store.DeployRequest{UserData: []byte("#cloud-config\n")})
	if m.State != store.StateDeploying || m.Credential == nil {
		t.Fatalf("deploying: %s credential %v", m.State, m.Credential)
	}
	phase := s.PhaseToken(m)
	m, err := s.Release(ctx, owner, "web1", "bootstrap cancelled")
	if err != nil || m.State != store.StateReleasing || m.Credential != nil || m.Owner != "" {
		t.Fatalf("release while deploying: %s credential %v owner %q, %v", m.State, m.Credential, m.Owner, err)
	}
	if _, err := s.UserData(admin, m.ID); store.CodeOf(err) != store.CodeNotFound {
		t.Errorf("user-data after the release: %v, want gone", err)
	}
	if _, err := s.Seed(ctx, phase); err == nil {
		t.Errorf("the deploy credential still opens the seed after the release")
	}
	open, err := s.OpenPowerRequests(m.ID)
	if err != nil || len(open) == 0 || open[len(open)-1].Action != store.PowerOff {
		t.Errorf("power requests after the release: %+v %v, want an off queued", open, err)
	}
}
