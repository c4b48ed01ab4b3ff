package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Deployments: what a machine's deployed OS is told about itself. A deploy
// writes a deployment record in the transaction that moves the machine to
// DEPLOYING: a fresh instance-id (so cloud-init reruns its per-instance
// modules on every redeploy), the owner's SSH keys as they are at that
// moment plus the extra ones of the request, the owner's user-data, and the
// OS credential with which the booted OS reports back. The deploy
// environment fetches the rendered seed with its phase credential (Seed),
// writes it beside the image, and reports the image written
// (Tx.diskWritten): the machine stays DEPLOYING, now booting its own disk,
// until the OS itself says cloud-init finished (OSPhoneHome). The record
// lives as long as the allocation: a release, or anything else that ends
// the allocation, deletes it, and with it the user-data and the OS
// credential.
//
// The OS credential reaches the OS inside the seed, in the URLs of its
// vendor-data (cloud-init's phone_home can send no header), so it is a
// path segment: "<machine id>.<HMAC>", the HMAC, as for phase credentials,
// of the machine's id, "os" and a nonce drawn per deployment, under the
// credential key. The id only finds the record; the HMAC proves the caller
// read this deployment's seed.

var (
	// bucketDeployments: machine id -> Deployment (without its user-data).
	bucketDeployments = []byte("deployments")
	// bucketUserData: machine id -> the deployment's user-data, raw. Kept
	// apart so that the reports, which read the record, do not decode a
	// MiB of user-data each.
	bucketUserData = []byte("user_data")
)

// MaxUserData bounds a deployment's user-data (decoded): what cloud-init
// datasources commonly accept, and what an API body can carry.
const MaxUserData = 1 << 20

// Bounds of what the OS reports about itself.
const (
	// maxOSErrors is how many cloud-init errors a deployment keeps (and
	// turns into events); later ones are counted, not kept.
	maxOSErrors = 20
	// maxOSErrorText bounds each field of a kept error.
	maxOSErrorText = 512
)

// Deployment is a machine's current deployment.
type Deployment struct {
	Machine string `json:"machine"`
	// InstanceID is cloud-init's instance-id: new for every deployment.
	InstanceID string `json:"instance_id"`
	Image      string `json:"image"`
	Owner      string `json:"owner"`
	// SSHKeys are the authorized_keys lines the OS gets (canonical form,
	// see ParseSSHKey): the owner's at deploy time, then the request's.
	SSHKeys []string `json:"ssh_keys"`
	// UserDataBytes is the size of the user-data (kept apart: UserData).
	UserDataBytes int       `json:"user_data_bytes"`
	Started       time.Time `json:"started"`
	// SeedServed is when the deploy environment first fetched the seed.
	// Without a seed the OS has no credential to report with: the image
	// written then ends the deployment, as it did before seeds.
	SeedServed time.Time `json:"seed_served,omitzero"`
	// ImageWritten is when the deploy environment reported the image on
	// disk; OSBooted when the OS reported cloud-init finished.
	ImageWritten time.Time `json:"image_written,omitzero"`
	OSBooted     time.Time `json:"os_booted,omitzero"`
	// OSErrors are the errors and warnings cloud-init reported, the first
	// maxOSErrors of them; OSErrorsDropped counts the rest.
	OSErrors        []OSError `json:"os_errors,omitempty"`
	OSErrorsDropped int       `json:"os_errors_dropped,omitempty"`
	// OSNonce and OSHash are the OS credential: its nonce and the token's
	// SHA-256, never the token.
	OSNonce string `json:"os_nonce"`
	OSHash  string `json:"os_hash"`
}

// OSError is one error or warning cloud-init reported.
type OSError struct {
	Time        time.Time `json:"time"`
	Result      string    `json:"result"` // FAIL or WARN
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
}

// DeployRequest asks for a deployment (see Deploy).
type DeployRequest struct {
	Machine string // id or hostname
	Image   string
	Reason  string
	// UserData is handed to cloud-init as it is (at most MaxUserData).
	UserData []byte
	// SSHKeys are authorized_keys lines added to the owner's keys.
	SSHKeys []string
}

// deployInput is what a validated DeployRequest adds to its transition.
type deployInput struct {
	userData []byte
	sshKeys  []ParsedSSHKey
}

// Deploy is the deploy transition with the deployment's identity: the
// user-data and SSH keys are checked here, outside the transaction (bad
// input: CodeInvalid naming the problem), and the deployment record is
// written by the transition itself. Who may: the owner or an admin.
func (s *Store) Deploy(ctx context.Context, actor Actor, req DeployRequest) (Machine, error) {
	in, err := prepareDeploy(req)
	if err != nil {
		return Machine{}, err
	}
	return s.Transition(ctx, actor, TransitionRequest{Machine: req.Machine, Action: ActionDeploy,
		Reason: req.Reason, Image: req.Image, deploy: in})
}

// prepareDeploy validates a deploy request's identity.
func prepareDeploy(req DeployRequest) (*deployInput, error) {
	if len(req.UserData) > MaxUserData {
		return nil, errorf(CodeInvalid, "user-data is %d bytes: at most %d", len(req.UserData), MaxUserData)
	}
	if len(req.SSHKeys) > MaxSSHKeysPerUser {
		return nil, errorf(CodeInvalid, "%d ssh keys: at most %d", len(req.SSHKeys), MaxSSHKeysPerUser)
	}
	in := &deployInput{userData: bytes.Clone(req.UserData)}
	for i, line := range req.SSHKeys {
		p, err := ParseSSHKey(line)
		if err != nil {
			return nil, errorf(CodeInvalid, "ssh_keys[%d]: %s", i, strings.TrimPrefix(err.Error(), "ssh key: "))
		}
		in.sshKeys = append(in.sshKeys, p)
	}
	return in, nil
}

func newInstanceID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "i-" + hex.EncodeToString(b)
}

// osToken derives the OS credential's token (see the top of this file).
func osToken(key []byte, id, nonce string) string {
	return id + "." + credentialToken(key, id, "os", nonce)
}

// osTokenMachine is the machine id an OS token names, false when it is no
// OS token's shape.
func osTokenMachine(token string) (string, bool) {
	id, mac, ok := strings.Cut(token, ".")
	if !ok || id == "" || len(id) > 64 || mac == "" || len(mac) > 128 {
		return "", false
	}
	return id, true
}

// startDeployment writes m's new deployment record, replacing any earlier
// one: keys are the owner's now, then in's (a key the owner has already is
// not repeated).
func (t *Tx) startDeployment(m Machine, in *deployInput) (Deployment, error) {
	if in == nil {
		in = &deployInput{}
	}
	owned, err := t.sshKeysOf(m.Owner)
	if err != nil {
		return Deployment{}, err
	}
	seen := map[string]bool{}
	var keys []string
	for _, k := range owned {
		if !seen[k.Fingerprint] {
			seen[k.Fingerprint] = true
			keys = append(keys, k.Key)
		}
	}
	for _, k := range in.sshKeys {
		if !seen[k.Fingerprint] {
			seen[k.Fingerprint] = true
			keys = append(keys, k.Key)
		}
	}
	b := make([]byte, 16)
	rand.Read(b)
	nonce := hex.EncodeToString(b)
	d := Deployment{Machine: m.ID, InstanceID: newInstanceID(), Image: m.DeployImage, Owner: m.Owner,
		SSHKeys: keys, UserDataBytes: len(in.userData), Started: t.now,
		OSNonce: nonce, OSHash: HashToken(osToken(t.credKey, m.ID, nonce))}
	if err := t.put(bucketDeployments, []byte(m.ID), d); err != nil {
		return Deployment{}, err
	}
	if len(in.userData) > 0 {
		err = t.putRaw(bucketUserData, []byte(m.ID), in.userData)
	} else {
		err = t.del(bucketUserData, []byte(m.ID))
	}
	return d, err
}

// endDeployment deletes m's deployment record, its user-data and with them
// its OS credential.
func (t *Tx) endDeployment(id string) error {
	if t.bucket(bucketDeployments).Get([]byte(id)) != nil {
		if err := t.del(bucketDeployments, []byte(id)); err != nil {
			return err
		}
	}
	if t.bucket(bucketUserData).Get([]byte(id)) != nil {
		return t.del(bucketUserData, []byte(id))
	}
	return nil
}

// adoptDeployment gives m's deployment, if it has one, to the new owner of
// its allocation (an adoption with the allocation token): the deployment,
// and its user-data, follow the allocation.
func (t *Tx) adoptDeployment(id, owner string) error {
	d, found, err := t.deployment(id)
	if err != nil || !found {
		return err
	}
	d.Owner = owner
	return t.put(bucketDeployments, []byte(id), d)
}

func (t *Tx) deployment(id string) (Deployment, bool, error) {
	var d Deployment
	found, err := t.get(bucketDeployments, []byte(id), &d)
	return d, found, err
}

// describeDeployment is the deploy event's account of the identity given:
// sizes and counts, never the user-data.
func describeDeployment(d Deployment) string {
	s := fmt.Sprintf("instance %s, %d ssh key", d.InstanceID, len(d.SSHKeys))
	if len(d.SSHKeys) != 1 {
		s += "s"
	}
	if d.UserDataBytes > 0 {
		s += fmt.Sprintf(", %d bytes of user-data", d.UserDataBytes)
	}
	return s
}

// mayReadDeployment: a deployment is its owner's and the admins' to see.
func mayReadDeployment(actor Actor, d Deployment) error {
	if actor.Admin || (actor.Name != "" && actor.Name == d.Owner) {
		return nil
	}
	return errorf(CodeForbidden, "the deployment of machine %s is its owner's: only they and admins may read it", d.Machine)
}

// DeploymentOf returns the current deployment of a machine, for its owner
// and admins (anyone else: CodeForbidden); CodeNotFound when the machine
// has none (never deployed since its allocation, or deployed before rackd
// kept deployments).
func (s *Store) DeploymentOf(actor Actor, idOrName string) (Deployment, error) {
	var d Deployment
	err := s.view(func(t *Tx) error {
		m, err := t.machine(idOrName)
		if err != nil {
			return err
		}
		var found bool
		if d, found, err = t.deployment(m.ID); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "machine %s has no deployment", m.Hostname)
		}
		return mayReadDeployment(actor, d)
	})
	if err != nil {
		return Deployment{}, err
	}
	return d, nil
}

// UserData returns the user-data of a machine's current deployment, for
// its owner and admins (see DeploymentOf); empty when the deploy gave none.
func (s *Store) UserData(actor Actor, idOrName string) ([]byte, error) {
	var out []byte
	err := s.view(func(t *Tx) error {
		m, err := t.machine(idOrName)
		if err != nil {
			return err
		}
		d, found, err := t.deployment(m.ID)
		if err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "machine %s has no deployment", m.Hostname)
		}
		if err := mayReadDeployment(actor, d); err != nil {
			return err
		}
		out = t.getRaw(bucketUserData, []byte(m.ID))
		return nil
	})
	return out, err
}

// SeedSource is what the seed of a deployment is rendered from.
type SeedSource struct {
	Machine    Machine
	Deployment Deployment
	UserData   []byte
	// OSToken is the OS credential's token, for the vendor-data's URLs.
	OSToken string
	// Addresses are the machine's sticky addresses, by interface in the
	// order of its MACs, each with its subnet.
	Addresses []SeedAddress
}

// SeedAddress is one sticky address of a machine and its subnet.
type SeedAddress struct {
	MAC    string
	IP     netip.Addr
	Subnet Subnet
}

// Seed returns what the deploy environment holding phaseToken writes as its
// machine's seed, and records (the first time) that it was served, with an
// event: from then on the deployment waits for its OS to report. The token
// must be the current deploy credential of a DEPLOYING machine that has a
// deployment record and whose image is not written yet. Anything else is
// CodeUnauthorized, naming nothing (the caller has proved nothing), except
// an image already written (CodeConflict: the seed went with it).
func (s *Store) Seed(ctx context.Context, phaseToken string) (SeedSource, error) {
	refused := errorf(CodeUnauthorized, "rejected credential: it is not the deploy credential of a machine being deployed")
	if phaseToken == "" {
		return SeedSource{}, refused
	}
	hash := []byte(HashToken(phaseToken))
	// The machine is found in a read: on an engine that compares every
	// key a transaction read (etcd, 128 comparisons and writes a
	// transaction), searching in the transaction would cost a comparison
	// per deployment of the rack. The transaction reads that machine
	// alone and checks the credential again.
	var id []byte
	err := s.view(func(t *Tx) error {
		id = nil
		machines := t.bucket(bucketMachines)
		c := t.bucket(bucketDeployments).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			m, ok, err := seedMachine(k, machines.Get(k), hash)
			if err != nil {
				return err
			}
			if ok {
				id = []byte(m.ID)
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return SeedSource{}, err
	}
	if id == nil {
		return SeedSource{}, refused
	}
	var out SeedSource
	err = s.update(ctx, func(t *Tx) error {
		out = SeedSource{}
		m, ok, err := seedMachine(id, t.bucket(bucketMachines).Get(id), hash)
		if err != nil {
			return err
		}
		if !ok {
			return refused
		}
		if !m.DiskWritten.IsZero() {
			return errorf(CodeConflict, "machine %s: the image is written already (at %s): its seed went with it",
				m.Hostname, m.DiskWritten.Format(time.RFC3339))
		}
		d, found, err := t.deployment(m.ID)
		if err != nil {
			return err
		}
		if !found {
			return refused
		}
		out = SeedSource{Machine: m, Deployment: d, UserData: t.getRaw(bucketUserData, id),
			OSToken: osToken(t.credKey, m.ID, d.OSNonce)}
		if out.Addresses, err = t.seedAddresses(m); err != nil {
			return err
		}
		if !d.SeedServed.IsZero() {
			return nil
		}
		d.SeedServed = t.now
		out.Deployment = d
		if err := t.put(bucketDeployments, []byte(m.ID), d); err != nil {
			return err
		}
		return t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name, Action: "deploy-progress",
			Reason: "seed of instance " + d.InstanceID + " fetched by the deploy environment"})
	})
	if err != nil {
		return SeedSource{}, err
	}
	return out, nil
}

// seedMachine decodes the machine record data (under key k) and reports
// whether it is DEPLOYING with the deploy credential whose hash is hash.
// Only records that are DEPLOYING and hold the hash are decoded.
func seedMachine(k, data, hash []byte) (Machine, bool, error) {
	if st, ok := topLevelString(data, "state"); !ok || State(st) != StateDeploying || !bytes.Contains(data, hash) {
		return Machine{}, false, nil
	}
	var m Machine
	if err := json.Unmarshal(data, &m); err != nil {
		return Machine{}, false, fmt.Errorf("decode machine %s: %w", k, err)
	}
	cr := m.Credential
	if cr == nil || cr.Phase != PhaseDeploy || subtle.ConstantTimeCompare(hash, []byte(cr.Hash)) != 1 {
		return Machine{}, false, nil
	}
	return m, true, nil
}

// seedAddresses lists m's sticky addresses by interface, each with its
// subnet.
func (t *Tx) seedAddresses(m Machine) ([]SeedAddress, error) {
	var out []SeedAddress
	for _, mac := range m.MACs {
		recs, err := t.addressesOfMAC(mac)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(recs, func(a, b Address) int { return a.IP.Compare(b.IP) })
		for _, a := range recs {
			if a.Kind != KindSticky || a.MachineID != m.ID {
				continue
			}
			sn, err := t.subnetFor(a.IP)
			if err != nil {
				return nil, err
			}
			out = append(out, SeedAddress{MAC: mac, IP: a.IP, Subnet: sn})
		}
	}
	return out, nil
}

// diskWritten is the deploy report of a machine that has a deployment
// record: the image (and the seed) are on disk, the machine reboots into
// its own system and stays DEPLOYING until that system reports.
func (t *Tx) diskWritten(m Machine, d Deployment, r PhaseReport) (ReportResult, error) {
	res := ReportResult{From: m.State, Since: m.StateSince, DiskWritten: true}
	m.DiskWritten = t.now
	if err := t.putMachine(&m); err != nil {
		return ReportResult{}, err
	}
	d.ImageWritten = t.now
	if err := t.put(bucketDeployments, []byte(m.ID), d); err != nil {
		return ReportResult{}, err
	}
	reason := writtenReason(r.Bytes, r.WriteTime, t.now.Sub(m.StateSince))
	if r.Detail != "" {
		reason += ": " + oneLine(r.Detail)
	}
	for _, why := range []string{reason, "rebooting to disk"} {
		if err := t.addEvent(Event{Machine: m.ID, Actor: ReportActor.Name, Action: "deploy-progress", Reason: why}); err != nil {
			return ReportResult{}, err
		}
	}
	res.Machine = m
	return res, nil
}

// writtenReason is the event of an image written: its size and the
// write's own time, as the environment measured it, and apart the time
// before the write (since the deployment began: the power-on, the boot of
// the deploy environment, the seed). An environment that does not say
// (an older one) leaves only the time since the deployment began.
func writtenReason(bytes int64, write, sinceStart time.Duration) string {
	mb := (bytes + 500_000) / 1_000_000
	if write <= 0 {
		return fmt.Sprintf("image written (%d MB, %s after the deployment began)", mb, seconds(sinceStart))
	}
	before := max(sinceStart-write, 0)
	return fmt.Sprintf("image written (%d MB in %s; power-on and boot before it: %s)", mb, shortSeconds(write), seconds(before))
}

// shortSeconds writes a duration as "0.38 s" below 10 s, "12 s" above.
func shortSeconds(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return seconds(d)
}

// seconds writes a duration as "12 s" (rounded).
func seconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int64(d.Round(time.Second)/time.Second))
}

// OSActor is the actor of the deployed OS's reports in events.
var OSActor = Actor{Name: "rackd/os", Admin: true}

// PhoneHome is the OS's report that cloud-init finished.
type PhoneHome struct {
	Token string
	// InstanceID is what cloud-init says its instance is, when it says.
	InstanceID string
	// Source is the caller's address, for the events.
	Source string
}

// OSReportResult says what an OS report did.
type OSReportResult struct {
	Machine Machine
	// Action is the transition made (ActionDeploymentDone), "" for none.
	Action Action
	// Since is when the machine entered DEPLOYING; Written when the image
	// was written (zero when the environment never said).
	Since, Written time.Time
}

// osRefused is the one answer to an OS token that proves nothing: no
// record, another deployment's, malformed.
func osRefused() error {
	return errorf(CodeForbidden, "rejected OS credential: it is not the credential of a current deployment "+
		"(it is valid for one machine and one deployment, and dies with its release)")
}

// osDeployment finds the deployment an OS token proves, or osRefused.
func (t *Tx) osDeployment(token string) (Machine, Deployment, error) {
	id, ok := osTokenMachine(token)
	if !ok {
		return Machine{}, Deployment{}, osRefused()
	}
	d, found, err := t.deployment(id)
	if err != nil {
		return Machine{}, Deployment{}, err
	}
	if !found || subtle.ConstantTimeCompare([]byte(HashToken(token)), []byte(d.OSHash)) != 1 {
		return Machine{}, Deployment{}, osRefused()
	}
	m, err := t.machine(id)
	if err != nil {
		return Machine{}, Deployment{}, err
	}
	return m, d, nil
}

// OSPhoneHome applies the deployed OS's report that cloud-init finished, in
// one transaction: the token must be the OS credential of the machine's
// current deployment (else CodeForbidden, nothing changes), the machine
// DEPLOYING and the report the first: the machine is DEPLOYED. A second
// report (a replay), or one for a deployment that ended otherwise (timed
// out, marked broken), is refused with CodeConflict and an event that says
// so.
func (s *Store) OSPhoneHome(ctx context.Context, p PhoneHome) (OSReportResult, error) {
	var (
		res   OSReportResult
		deny  error
		kicks []string
	)
	err := s.update(ctx, func(t *Tx) error {
		t.powerKicks = nil
		defer func() { kicks = t.powerKicks }()
		res, deny = OSReportResult{}, nil
		m, d, err := t.osDeployment(p.Token)
		if CodeOf(err) == CodeForbidden {
			deny = err
			return nil
		} else if err != nil {
			return err
		}
		res = OSReportResult{Machine: m, Since: m.StateSince, Written: d.ImageWritten}
		refuse := func(why string) error {
			deny = errorf(CodeConflict, "machine %s: %s", m.Hostname, why)
			return t.addEvent(Event{Machine: m.ID, Actor: OSActor.Name, Action: "os-report-refused",
				Reason: "phone-home from " + p.Source + " refused: " + why})
		}
		switch {
		case !d.OSBooted.IsZero():
			return refuse("the OS already reported at " + d.OSBooted.Format(time.RFC3339) + " (a replay)")
		case m.State != StateDeploying:
			return refuse(fmt.Sprintf("the machine is %s, not DEPLOYING", m.State))
		}
		d.OSBooted = t.now
		if err := t.put(bucketDeployments, []byte(m.ID), d); err != nil {
			return err
		}
		from := d.ImageWritten
		if from.IsZero() {
			from = m.StateSince
		}
		reason := "OS booted, cloud-init finished (" + seconds(t.now.Sub(from)) + ")"
		if p.InstanceID != "" && p.InstanceID != d.InstanceID {
			reason += fmt.Sprintf("; it reports instance %q, not %s", oneLine(cut(p.InstanceID, 64)), d.InstanceID)
		}
		res.Machine, err = t.transitionMachine(OSActor, m, TransitionRequest{Machine: m.ID, Action: ActionDeploymentDone, Reason: reason})
		res.Action = ActionDeploymentDone
		return err
	})
	if err != nil {
		return OSReportResult{}, err
	}
	s.notifyPower(kicks)
	return res, deny
}

// OSEventReport is one event of cloud-init's webhook reporter.
type OSEventReport struct {
	Token       string
	Name        string
	Description string
	EventType   string
	Result      string
}

// OSEvent takes one event of the deployed OS's cloud-init (its webhook
// reporter): the token must be the OS credential of the machine's current
// deployment (else CodeForbidden). Errors and warnings (result FAIL or
// WARN) are kept on the deployment and become machine events, the first
// maxOSErrors of them; everything else is acknowledged and dropped. It
// reports whether the event was kept.
func (s *Store) OSEvent(ctx context.Context, e OSEventReport) (bool, error) {
	result := strings.ToUpper(e.Result)
	// The token is checked in a read first: the many events that are not
	// errors cost no commit.
	if err := s.view(func(t *Tx) error {
		_, _, err := t.osDeployment(e.Token)
		return err
	}); err != nil {
		return false, err
	}
	if result != "FAIL" && result != "WARN" {
		return false, nil
	}
	kept := false
	err := s.update(ctx, func(t *Tx) error {
		kept = false
		m, d, err := t.osDeployment(e.Token)
		if err != nil {
			return err
		}
		if len(d.OSErrors) >= maxOSErrors {
			d.OSErrorsDropped++
			if d.OSErrorsDropped == 1 {
				if err := t.addEvent(Event{Machine: m.ID, Actor: OSActor.Name, Action: "os-error",
					Reason: fmt.Sprintf("cloud-init reported more than %d errors: the later ones are counted, not kept", maxOSErrors)}); err != nil {
					return err
				}
			}
			return t.put(bucketDeployments, []byte(m.ID), d)
		}
		oe := OSError{Time: t.now, Result: result, Name: oneLine(cut(e.Name, maxOSErrorText)),
			Description: oneLine(cut(e.Description, maxOSErrorText))}
		d.OSErrors = append(d.OSErrors, oe)
		kept = true
		if err := t.put(bucketDeployments, []byte(m.ID), d); err != nil {
			return err
		}
		reason := "cloud-init " + oe.Result + ": " + oe.Name
		if oe.Description != "" {
			reason += ": " + oe.Description
		}
		return t.addEvent(Event{Machine: m.ID, Actor: OSActor.Name, Action: "os-error", Reason: reason})
	})
	return kept, err
}

// cut cuts s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// deployingExpiry is the watchdog's reason for a deployment whose image
// was written and whose OS never reported.
func deployingExpiry(m Machine, deploying time.Duration) string {
	return fmt.Sprintf("timeout: image written at %s; the OS did not report that cloud-init finished within %s",
		m.DiskWritten.Format(time.RFC3339), deploying)
}

// checkDeployments verifies the deployments for Check: every record is
// stored under its machine, which exists, holds it (or is BROKEN) for the
// same owner; user-data exists exactly for records that count some, of
// that size; a machine's disk is marked written only while DEPLOYING.
func (t *Tx) checkDeployments(machines map[string]Machine, bad func(string, ...any)) {
	have := map[string]bool{}
	t.tx.Bucket(bucketDeployments).ForEach(func(k, v []byte) error {
		var d Deployment
		if err := json.Unmarshal(v, &d); err != nil {
			bad("deployment %s: undecodable: %v", k, err)
			return nil
		}
		have[string(k)] = true
		m, ok := machines[string(k)]
		switch {
		case d.Machine != string(k):
			bad("deployment of machine %s stored under key %s", d.Machine, k)
		case !ok:
			bad("deployment %s belongs to no machine", k)
		case !holds(m.State) && m.State != StateBroken:
			bad("machine %s is %s but has a deployment", m.ID, m.State)
		case m.Owner != d.Owner:
			bad("machine %s is owned by %q but its deployment by %q", m.ID, m.Owner, d.Owner)
		case d.InstanceID == "" || d.OSNonce == "" || d.OSHash == "":
			bad("deployment of machine %s lacks its instance-id or OS credential", m.ID)
		}
		ud := t.tx.Bucket(bucketUserData).Get(k)
		if len(ud) != d.UserDataBytes {
			bad("deployment of machine %s counts %d bytes of user-data, %d are stored", k, d.UserDataBytes, len(ud))
		}
		if len(d.OSErrors) > maxOSErrors {
			bad("deployment of machine %s keeps %d OS errors, more than %d", k, len(d.OSErrors), maxOSErrors)
		}
		return nil
	})
	t.tx.Bucket(bucketUserData).ForEach(func(k, _ []byte) error {
		if !have[string(k)] {
			bad("user-data of machine %s without a deployment", k)
		}
		return nil
	})
	for id, m := range machines {
		if !m.DiskWritten.IsZero() && m.State != StateDeploying {
			bad("machine %s is %s with its disk marked written", id, m.State)
		}
	}
}
