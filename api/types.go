// Package api holds the wire types of rackd's HTTP API v1 (see docs/API.md).
// The server (package agent) and the client (package agent/client, used by
// the CLI) share them so that the two can never disagree on a field name.
package api

import (
	"bytes"
	"encoding/json"
	"time"
)

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error codes named by the API contract. Clients match on these, never on the
// human sentence.
const (
	CodeUnauthorized       = "unauthorized"
	CodeForbidden          = "forbidden"
	CodeNotFound           = "not_found"
	CodeConflict           = "conflict"
	CodeInvalidTransition  = "invalid_transition"
	CodeAllocated          = "allocated"
	CodeNoAvailableMachine = "no_available_machine"
	CodeBadRequest         = "bad_request"
	CodeBodyTooLarge       = "body_too_large"
	CodeUnsupportedMedia   = "unsupported_media_type"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeInternal           = "internal"
	CodeUnavailable        = "unavailable"
	CodeIPInUse            = "ip_in_use"
	CodeNoSubnet           = "no_subnet"
	CodeExhausted          = "exhausted"
	CodeRateLimited        = "rate_limited"
	CodeConsoleBusy        = "console_busy" // another user (named) or SOL client holds the console
	CodeNoConsole          = "no_console"   // the machine's power driver has no serial console
	CodeBMCError           = "bmc_error"    // the BMC refused or failed the request
	// The appliance's update and reset routes.
	CodeNotAnAppliance  = "not_an_appliance"
	CodeBundleInvalid   = "bundle_invalid"
	CodeBundleSignature = "bundle_signature"
	CodeBundleRefused   = "bundle_refused"
	CodeDowngrade       = "downgrade"
	CodeFetchFailed     = "fetch_failed"
)

// PowerParams are what an operator gives to reach a machine's BMC. Username and
// password are write-only: they are never returned by the API.
type PowerParams struct {
	Driver   string `json:"driver"`
	Address  string `json:"address,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// CipherSuite is the IPMI 2.0 cipher suite (0: the driver's default, 3;
	// 17 where the BMC offers it).
	CipherSuite int `json:"cipher_suite,omitempty"`
	// TLSFingerprint (redfish) is the SHA-256 of the BMC's certificate to
	// enforce (hex, colons allowed); empty trusts the first one seen and
	// records it.
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
	// InsecureTLS (redfish) checks no certificate at all: the operator's
	// explicit choice for this machine.
	InsecureTLS bool `json:"insecure_tls,omitempty"`
	// BootMode (redfish) is "uefi" or "legacy" for the one-time boot
	// override; empty keeps the BMC's.
	BootMode string `json:"boot_mode,omitempty"`
}

// PowerView is the power part of a machine as the API shows it.
type PowerView struct {
	Driver  string `json:"driver"`
	Address string `json:"address,omitempty"`
	// SetBy is "commissioning" when the commissioning's BMC set-up wrote
	// the power configuration, empty when an operator did.
	SetBy string `json:"set_by,omitempty"`
	// TLSFingerprint is the BMC certificate pinned (set, or trusted on
	// first use); InsecureTLS says no certificate is checked.
	TLSFingerprint string `json:"tls_fingerprint,omitempty"`
	InsecureTLS    bool   `json:"insecure_tls,omitempty"`
	BootMode       string `json:"boot_mode,omitempty"`
	Desired        string `json:"desired"`
	Observed       string `json:"observed"`
}

// IP is one address bound to one of a machine's interfaces.
type IP struct {
	IP   string `json:"ip"`
	MAC  string `json:"mac"`
	Kind string `json:"kind"`
}

// Machine is a machine as the API shows it.
type Machine struct {
	ID         string    `json:"id"`
	Hostname   string    `json:"hostname"`
	State      string    `json:"state"`
	Arch       string    `json:"arch"`
	MACs       []string  `json:"macs"`
	Owner      string    `json:"owner"`
	AgentName  string    `json:"agent_name"`
	CPUCount   int       `json:"cpu_count"`
	MemoryMB   int       `json:"memory_mb"`
	Tags       []string  `json:"tags"`
	Zone       string    `json:"zone,omitempty"`
	IPs        []IP      `json:"ips"`
	Power      PowerView `json:"power"`
	StateSince time.Time `json:"state_since"`
	Created    time.Time `json:"created"`
	// Inventory is what the machine reported when it enlisted or, later,
	// commissioned; absent for machines added by hand.
	Inventory *Inventory `json:"inventory,omitempty"`
	// DeployImage is the image the machine deploys or deployed.
	DeployImage string `json:"deploy_image,omitempty"`
	// Deployment is the machine's current deployment, shown to its owner
	// and admins only.
	Deployment *Deployment `json:"deployment,omitempty"`
	// Notice is set in the answer to a lifecycle action when a human must
	// act for it to go on (a machine with the manual power driver must be
	// powered by hand).
	Notice string `json:"notice,omitempty"`
}

// Inventory is a machine's hardware as it reported it at enlistment
// (POST /metadata/v1/enlist).
type Inventory struct {
	SystemUUID string `json:"system_uuid,omitempty"`
	Vendor     string `json:"vendor,omitempty"`
	Product    string `json:"product,omitempty"`
	Serial     string `json:"serial,omitempty"`
	BMCAddress string `json:"bmc_address,omitempty"`
	Disks      []Disk `json:"disks"`
}

// Disk is one block device of an inventory.
type Disk struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
}

// CreateMachine is the body of POST /api/v1/machines.
type CreateMachine struct {
	Hostname string       `json:"hostname"`
	Arch     string       `json:"arch"`
	MACs     []string     `json:"macs"`
	Power    *PowerParams `json:"power,omitempty"`
	CPUCount int          `json:"cpu_count"`
	MemoryMB int          `json:"memory_mb"`
	Tags     []string     `json:"tags,omitempty"`
	Zone     string       `json:"zone,omitempty"`
	// State is NEW (default), READY or DEPLOYED.
	State string `json:"state,omitempty"`
}

// Field is one member of a JSON merge patch (the body of a PATCH): Set when
// the member is present. JSON null sets it to the zero value, which clears
// it; an absent member leaves the value as it is.
type Field[T any] struct {
	Value T
	Set   bool
}

// Some returns a set Field.
func Some[T any](v T) Field[T] { return Field[T]{Value: v, Set: true} }

// UnmarshalJSON records that the member is present. Unknown fields inside
// it are refused, as everywhere in the API.
func (f *Field[T]) UnmarshalJSON(b []byte) error {
	f.Set = true
	var zero T
	f.Value = zero
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(&f.Value)
}

// MarshalJSON writes the value; an unset Field is left out by omitzero.
func (f Field[T]) MarshalJSON() ([]byte, error) { return json.Marshal(f.Value) }

// MachinePatch is the body of PATCH /api/v1/machines/{id}: a JSON merge
// patch of the machine's record. "power": null removes the power
// parameters; inside "power", each member changes that parameter alone.
type MachinePatch struct {
	Hostname Field[string]      `json:"hostname,omitzero"`
	Arch     Field[string]      `json:"arch,omitzero"`
	CPUCount Field[int]         `json:"cpu_count,omitzero"`
	MemoryMB Field[int]         `json:"memory_mb,omitzero"`
	Tags     Field[[]string]    `json:"tags,omitzero"`
	Zone     Field[string]      `json:"zone,omitzero"`
	Power    Field[*PowerPatch] `json:"power,omitzero"`
	// Reason is kept in the machine's update event.
	Reason string `json:"reason,omitempty"`
}

// PowerPatch changes a machine's power parameters member by member.
// Username and password are write-only, as everywhere.
type PowerPatch struct {
	Driver      Field[string] `json:"driver,omitzero"`
	Address     Field[string] `json:"address,omitzero"`
	Username    Field[string] `json:"username,omitzero"`
	Password    Field[string] `json:"password,omitzero"`
	CipherSuite Field[int]    `json:"cipher_suite,omitzero"`
	// TLSFingerprint "" trusts the next certificate the BMC shows.
	TLSFingerprint Field[string] `json:"tls_fingerprint,omitzero"`
	InsecureTLS    Field[bool]   `json:"insecure_tls,omitzero"`
	BootMode       Field[string] `json:"boot_mode,omitzero"`
}

// DeleteMachine is the optional body of DELETE /api/v1/machines/{id}.
type DeleteMachine struct {
	// Force deletes a machine that is allocated, deployed or in a phase.
	Force  bool   `json:"force,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ActionRequest is the optional body of POST /api/v1/machines/{id}/{action}.
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
	// Image names the image to deploy (deploy only).
	Image string `json:"image,omitempty"`
	// Erase, on a release, boots the machine into the erase environment,
	// which wipes the first and last MiB of its disks, before it is READY.
	Erase bool `json:"erase,omitempty"`
	// ForceBMCSetup, on a commission, lets the commissioning's BMC set-up
	// replace a power configuration an operator set.
	ForceBMCSetup bool `json:"force_bmc_setup,omitempty"`
	// UserData (deploy only) is cloud-init user-data, base64-encoded; at
	// most MaxUserData bytes decoded.
	UserData string `json:"user_data,omitempty"`
	// SSHKeys (deploy only) are authorized_keys lines the deployed OS
	// accepts besides the owner's keys.
	SSHKeys []string `json:"ssh_keys,omitempty"`
}

// AbortRequest is the optional body of POST /api/v1/machines/{id}/abort.
type AbortRequest struct {
	// Reason goes into the abort's event.
	Reason string `json:"reason,omitempty"`
}

// Constraints select machines for allocate-by-constraints.
type Constraints struct {
	Arch        string   `json:"arch,omitempty"`
	MinCPU      int      `json:"min_cpu,omitempty"`
	MinMemoryMB int      `json:"min_memory_mb,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	Zone        string   `json:"zone,omitempty"`
}

// AllocateRequest is the body of POST /api/v1/allocations.
type AllocateRequest struct {
	Name        string       `json:"name,omitempty"`
	AgentName   string       `json:"agent_name,omitempty"`
	Token       string       `json:"token,omitempty"`
	Constraints *Constraints `json:"constraints,omitempty"`
}

// Allocation is the answer of POST /api/v1/allocations. Token is set only when
// a new token was minted (new allocation or adoption); it is shown once.
type Allocation struct {
	Machine Machine `json:"machine"`
	Token   string  `json:"token,omitempty"`
}

// CreateUser is the body of POST /api/v1/users.
type CreateUser struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin,omitempty"`
}

// User is a user as the API shows it. Token is only set in the answer that
// created it.
type User struct {
	Name    string    `json:"name"`
	Admin   bool      `json:"admin"`
	Token   string    `json:"token,omitempty"`
	Created time.Time `json:"created"`
}

// Event is one entry of a machine's history.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Machine string    `json:"machine"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// Console is the end of the machine's console log (about 4 KiB) on
	// the event that moved it to FAILED_COMMISSIONING or
	// FAILED_DEPLOYMENT; shown to admins and the machine's owner only.
	Console string `json:"console,omitempty"`
}

// ConsoleBoot is one boot kept in a machine's console log (GET
// /api/v1/machines/{id}/console-log).
type ConsoleBoot struct {
	Boot    int       `json:"boot"`
	Started time.Time `json:"started"`
	Phase   string    `json:"phase,omitempty"`
	// Bytes is how much output is kept; Dropped how much older output
	// the per-boot cap removed.
	Bytes   int64 `json:"bytes"`
	Dropped int64 `json:"dropped"`
}

// Health is the body of GET /healthz. Status is "ok", or what is not
// ready, in words; NotReady lists the same one item at a time.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Store is "ok" or why the database does not answer.
	Store string `json:"store,omitempty"`
	// DHCPInterfaces are the configured DHCP interfaces, DHCPBound those
	// being served.
	DHCPInterfaces []string `json:"dhcp_interfaces,omitempty"`
	DHCPBound      []string `json:"dhcp_bound,omitempty"`
	NotReady       []string `json:"not_ready,omitempty"`
}

// ApplianceSlot is one system slot of the appliance.
type ApplianceSlot struct {
	Version string `json:"version,omitempty"`
	Build   int64  `json:"build,omitempty"`
	// State is good, trying, failed, empty or unknown.
	State string `json:"state"`
	// Device is the slot's block device.
	Device string `json:"device,omitempty"`
}

// ApplianceUpdate is the last update and its result: armed, good, failed
// or refused.
type ApplianceUpdate struct {
	Version  string     `json:"version,omitempty"`
	Build    int64      `json:"build,omitempty"`
	Slot     string     `json:"slot,omitempty"`
	Started  time.Time  `json:"started"`
	Finished *time.Time `json:"finished,omitempty"`
	Result   string     `json:"result"`
	Reason   string     `json:"reason,omitempty"`
}

// ApplianceStatus is the body of GET /api/v1/appliance/status, and of a
// successful update or reset.
type ApplianceStatus struct {
	// Version and Build are the running rackd's; Booted its slot, Trial
	// whether this boot is an update's trial not yet marked good.
	Version string `json:"version"`
	Build   int64  `json:"build"`
	Booted  string `json:"booted"`
	Trial   bool   `json:"trial"`
	// GoodSlot is the slot GRUB falls back to; NextBoot the slot the next
	// boot starts, NextBootTrial whether as a trial.
	GoodSlot       string                   `json:"good_slot"`
	NextBoot       string                   `json:"next_boot"`
	NextBootTrial  bool                     `json:"next_boot_trial"`
	ResetRequested bool                     `json:"reset_requested"`
	Slots          map[string]ApplianceSlot `json:"slots"`
	LastUpdate     *ApplianceUpdate         `json:"last_update,omitempty"`
	// Rebooting says rackd is stopping so that the appliance reboots
	// (after an update was armed or a factory reset requested).
	Rebooting bool `json:"rebooting,omitempty"`
}

// ApplianceUpdateRequest is the JSON body of POST /api/v1/appliance/update
// that has rackd fetch the bundle itself (the other body is the bundle).
type ApplianceUpdateRequest struct {
	URL string `json:"url"`
}

// ApplianceResetRequest is the body of POST /api/v1/appliance/reset.
type ApplianceResetRequest struct {
	Confirm bool `json:"confirm"`
}

// Version is the body of GET /api/v1/version.
type Version struct {
	Version string `json:"version"`
	Schema  int    `json:"schema"`
}

// Range is an inclusive range of addresses.
type Range struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// Subnet is a managed network (POST/GET /api/v1/subnets).
type Subnet struct {
	CIDR           string    `json:"cidr"`
	Gateway        string    `json:"gateway,omitempty"`
	DNSServers     []string  `json:"dns_servers,omitempty"`
	Domain         string    `json:"domain,omitempty"`
	LeaseSeconds   int       `json:"lease_seconds,omitempty"`
	DynamicRanges  []Range   `json:"dynamic_ranges,omitempty"`
	ReservedRanges []Range   `json:"reserved_ranges,omitempty"`
	Created        time.Time `json:"created,omitzero"`
	// Read-only: the size of the dynamic ranges and how much of it is used.
	DynamicSize uint64 `json:"dynamic_size,omitempty"`
	DynamicUsed uint64 `json:"dynamic_used,omitempty"`
}

// ReserveRequest is the body of POST /api/v1/ips/reservations.
type ReserveRequest struct {
	IP       string `json:"ip,omitempty"`
	Subnet   string `json:"subnet,omitempty"`
	MAC      string `json:"mac,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Purpose  string `json:"purpose,omitempty"`
}

// Address is one address in use (GET /api/v1/ips, reservations).
type Address struct {
	IP       string    `json:"ip"`
	Subnet   string    `json:"subnet"`
	Kind     string    `json:"kind"`
	MAC      string    `json:"mac,omitempty"`
	Machine  string    `json:"machine,omitempty"`
	Hostname string    `json:"hostname,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	Purpose  string    `json:"purpose,omitempty"`
	Expires  time.Time `json:"expires,omitzero"`
	Created  time.Time `json:"created,omitzero"`
}

// AssignIP is the body of POST /api/v1/machines/{id}/ips.
type AssignIP struct {
	MAC    string `json:"mac"`
	IP     string `json:"ip,omitempty"`
	Subnet string `json:"subnet,omitempty"`
	Alias  bool   `json:"alias,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Lease is one live dynamic lease (GET /api/v1/leases).
type Lease struct {
	IP       string    `json:"ip"`
	MAC      string    `json:"mac"`
	Hostname string    `json:"hostname"`
	Expires  time.Time `json:"expires"`
	Subnet   string    `json:"subnet"`
}

// ImageFile is one artefact of an image, served over HTTP and TFTP as
// images/<sha256>.
type ImageFile struct {
	Path   string `json:"path"`
	Role   string `json:"role"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Format is a disk file's: raw, gzip, xz or zstd (a qcow2 is stored
	// converted, as zstd). RawSize and RawSHA256 are of the raw disk image
	// it holds (for a raw one, its own size and digest).
	Format    string `json:"format,omitempty"`
	RawSize   int64  `json:"raw_size,omitempty"`
	RawSHA256 string `json:"raw_sha256,omitempty"`
	// Chunks is the SHA-256 of a disk file's chunk list (the digest of
	// each 4 MiB chunk of the raw image), a blob served as
	// images/<Chunks>; empty for images imported before chunk lists.
	Chunks string `json:"chunks,omitempty"`
}

// Image is one imported boot image (GET /api/v1/images).
type Image struct {
	Name    string `json:"name"`
	Arch    string `json:"arch"`
	Purpose string `json:"purpose"`
	// Cmdline is the image's own kernel arguments, rendered after
	// rackd's in the boot configs (empty: none).
	Cmdline string `json:"cmdline,omitempty"`
	// OS and Series are how MAAS's API names a deploy image (osystem,
	// distro_series): the image's own, or read from its name.
	OS      string      `json:"os,omitempty"`
	Series  string      `json:"series,omitempty"`
	Files   []ImageFile `json:"files"`
	Created time.Time   `json:"created,omitzero"`
}

// ImportImage is the body of POST /api/v1/images/import. Exactly one of
// Dir and URL is set: Dir, a directory on the rackd host holding a
// rackd-image.json manifest and its files, or URL, an http(s) URL of a
// rackd-image.json (or of the directory holding one) that rackd fetches.
// With Background the answer is 202 and the import's job, to follow with
// GET /api/v1/images/imports/{id}; without it, the request waits and
// answers 201 with the image.
//
// A URL given with SHA256 or Checksums is not a manifest but a bare disk
// image, as vendors publish their cloud images (raw, gzip, xz, zstd or
// qcow2), and SHA256 its digest or Checksums the URL of a SHA256SUMS,
// SHA512SUMS or BSD-style checksum list naming it: rackd makes a deploy
// image of it, named Name (default: from the file name) for Arch (default
// amd64), after checking the download against that digest.
type ImportImage struct {
	Dir       string `json:"dir,omitempty"`
	URL       string `json:"url,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
	Checksums string `json:"checksums,omitempty"`
	Name      string `json:"name,omitempty"`
	Arch      string `json:"arch,omitempty"`
	// OS and Series name a deploy image for MAAS's API (osystem,
	// distro_series), over what its manifest says (optional).
	OS         string `json:"os,omitempty"`
	Series     string `json:"series,omitempty"`
	Background bool   `json:"background,omitempty"`
}

// Import job states.
const (
	ImportRunning   = "running"
	ImportDone      = "done"
	ImportFailed    = "failed"
	ImportCancelled = "cancelled"
)

// ImportJob is one image import, running or finished
// (GET /api/v1/images/imports/{id}). Jobs live in rackd's memory: a
// restart forgets them (and cancels the running ones).
type ImportJob struct {
	ID string `json:"id"`
	// Source is the directory or URL imported (credentials removed).
	Source string `json:"source"`
	// State is running, done, failed or cancelled.
	State string `json:"state"`
	// File is the manifest path of the file being copied.
	File string `json:"file,omitempty"`
	// Step says what the import does with File once it is downloaded,
	// when it does something: converting a qcow2 disk image, compressing
	// the conversion.
	Step string `json:"step,omitempty"`
	// BytesDone of BytesTotal (the sum of the manifest's sizes; 0 until
	// the manifest is read) are stored; FilesDone of Files likewise.
	BytesDone  int64 `json:"bytes_done"`
	BytesTotal int64 `json:"bytes_total"`
	FilesDone  int   `json:"files_done"`
	Files      int   `json:"files"`
	// By is the user who started the import.
	By       string    `json:"by"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Error says why a failed or cancelled import stopped.
	Error string `json:"error,omitempty"`
	// Image is the imported image once State is done.
	Image *Image `json:"image,omitempty"`
}
