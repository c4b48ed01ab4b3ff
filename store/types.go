package store

import "time"

// PowerParams say how to reach a machine's BMC. Username and Password never
// leave through the API. Password is never stored as it is: a write seals
// it into Machine.Secrets (secrets.go), and it is empty in every machine the
// store returns except those of MachineForPower.
type PowerParams struct {
	Driver   string `json:"driver,omitempty"`
	Address  string `json:"address,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"-"`
	// CipherSuite is the IPMI 2.0 cipher suite (0: the driver's default).
	CipherSuite int `json:"cipher_suite,omitempty"`
	// TLSFingerprint is the SHA-256 of the BMC's TLS certificate (64
	// lower-case hex digits) a driver over TLS (redfish) enforces; empty
	// trusts the first certificate seen and records it here.
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
	// InsecureTLS is the operator's explicit choice not to check the BMC's
	// certificate (never implied).
	InsecureTLS bool `json:"insecure_tls,omitempty"`
	// BootMode is "uefi" or "legacy": the firmware mode a one-time boot
	// override asks for (redfish); empty keeps the BMC's.
	BootMode string `json:"boot_mode,omitempty"`
}

// Machine is one server of the rack.
type Machine struct {
	ID       string   `json:"id"`
	Hostname string   `json:"hostname"`
	State    State    `json:"state"`
	Arch     string   `json:"arch"`
	MACs     []string `json:"macs"`
	CPUCount int      `json:"cpu_count"`
	MemoryMB int      `json:"memory_mb"`
	Tags     []string `json:"tags,omitempty"`
	Zone     string   `json:"zone,omitempty"`
	// Allocation is set while the machine is held. It lives inside the
	// machine's record, so "at most one allocation per machine" holds by
	// construction and an allocation costs one record write, not two.
	Allocation *Allocation `json:"allocation,omitempty"`
	// Owner and AgentName mirror Allocation (empty when there is none), for
	// listing and filtering; Check verifies that they agree.
	Owner     string `json:"owner,omitempty"`
	AgentName string `json:"agent_name,omitempty"`
	// OwnerData is what the owner keeps on the machine while it holds it
	// (MAAS's owner_data: Juju's model and unit names, say): key -> value,
	// bounded (SetOwnerData), gone when the allocation ends.
	OwnerData map[string]string `json:"owner_data,omitempty"`
	Power     PowerParams       `json:"power"`
	// Secrets are the machine's BMC secrets, sealed (secrets.go): field
	// name ("power.password") -> envelope.
	Secrets map[string][]byte `json:"secrets,omitempty"`
	// PowerSetBy is PowerSetByCommissioning when the commissioning's BMC
	// set-up wrote Power, "" when an operator did (or nobody): the set-up
	// replaces only its own (bmcsetup.go).
	PowerSetBy string `json:"power_set_by,omitempty"`
	// ForceBMCSetup is set while a commissioning the operator started
	// with --force-bmc-setup runs: its BMC set-up replaces the power
	// configuration whoever set it.
	ForceBMCSetup bool `json:"force_bmc_setup,omitempty"`
	// DeployImage names the image the machine deploys (set by deploy).
	DeployImage string `json:"deploy_image,omitempty"`
	// SystemUUID is the SMBIOS system UUID the machine reported when it
	// enlisted (lower case; empty when it had none or a placeholder). It
	// identifies the machine across NIC changes (see Enlist).
	SystemUUID string `json:"system_uuid,omitempty"`
	// Inventory is what the machine reported about itself when it enlisted.
	Inventory *Inventory `json:"inventory,omitempty"`
	// Credential is the phase credential of a machine whose environment
	// reports back (COMMISSIONING, DEPLOYING, RELEASING with an erase):
	// a nonce and the token's hash, never the token (see phases.go).
	Credential *Credential `json:"credential,omitempty"`
	// LastReport is the credential (hash) of the last phase report
	// accepted, so that the same report sent again is answered without
	// changing anything.
	LastReport *Credential `json:"last_report,omitempty"`
	// DiskWritten is when the deploy environment reported the image
	// written, while the machine is DEPLOYING and waits for its OS to
	// report (deployments.go): from then on it boots its own disk.
	DiskWritten time.Time `json:"disk_written,omitzero"`
	// Erase is set while a release erases the disks first.
	Erase bool `json:"erase,omitempty"`
	// Commissioned records that the hardware is known, which decides where
	// mark-fixed leads.
	Commissioned bool      `json:"commissioned"`
	StateSince   time.Time `json:"state_since"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
}

// Allocation is a machine held by a user on behalf of an agent. The token is
// kept only as a hash: whoever shows the token may adopt the allocation.
type Allocation struct {
	Owner     string    `json:"owner"`
	AgentName string    `json:"agent_name"`
	TokenHash string    `json:"token_hash"`
	Created   time.Time `json:"created"`
}

// User is an API user. Its tokens are records of their own (Token).
type User struct {
	Name    string    `json:"name"`
	Admin   bool      `json:"admin"`
	Created time.Time `json:"created"`
}

// Event is one line of a machine's history: who did what, when, from which
// state to which, and why.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Machine string    `json:"machine"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	From    State     `json:"from,omitempty"`
	To      State     `json:"to,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// Console is the end of the machine's console log when the event moved
	// it to a failed state (Store.ConsoleTail).
	Console string `json:"console,omitempty"`
}

// Actor names who asked for a change: a user, or rackd itself ("rackd",
// "rackd/watchdog").
type Actor struct {
	Name  string
	Admin bool
	// Token is the id of the token the actor authenticated with; empty for
	// rackd itself (see WithActor).
	Token string
}

// System is rackd acting on its own behalf.
var System = Actor{Name: "rackd", Admin: true}
