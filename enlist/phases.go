package enlist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
)

// The phase reports: the commissioning, deploy and erase
// environments end by telling rackd how it went. Unlike whoami and enlist
// these change a known machine, so they carry the machine's phase
// credential as a Bearer token. The boot config names the machine
// (rackd.machine=) but carries no credential: TFTP and HTTP serve it to
// anyone who names the MAC. The environment claims the credential when it
// starts, once per phase, from the address of its DHCP lease; a second
// claim is refused (409) and shows in the machine's events. The credential
// is used once: a report that arrives twice (an answer lost on the way
// back) is answered again without changing anything.
//
//	POST /metadata/v1/credential    CredentialRequest{machine, mac}
//	  -> 200 Credential{token, phase, bmc_setup}
//	  |  403 {"error", "code": "forbidden"}  (not the binding's holder, not in a phase, ...)
//	  |  409 {"error", "code": "conflict"}   (claimed already in this phase)
//	POST /metadata/v1/commissioned  Report{machine, inventory, bmc | error}
//	POST /metadata/v1/deployed      Report{machine, disk, bytes, sha256 | error}
//	POST /metadata/v1/erased        Report{machine, erased | error}
//	  -> 200 ReportAnswer{state, action}
//	  |  401 {"error", "code": "unauthorized"}

// The paths of the phase reports.
const (
	PathCommissioned = "/metadata/v1/commissioned"
	PathDeployed     = "/metadata/v1/deployed"
	PathErased       = "/metadata/v1/erased"
)

// Modes of the environment, rackd.mode= on the kernel command line.
const (
	ModeEnlist     = "enlist"
	ModeCommission = "commission"
	ModeDeploy     = "deploy"
	ModeErase      = "erase"
)

// CredentialRequest is the body of POST /metadata/v1/credential.
type CredentialRequest struct {
	// Machine is the machine's id (rackd.machine=).
	Machine string `json:"machine"`
	// MAC is the interface whose DHCP lease the request comes from.
	MAC string `json:"mac"`
}

// Validate checks the request's fields.
func (c CredentialRequest) Validate() error {
	if !machineIDRE.MatchString(c.Machine) {
		return fmt.Errorf("machine %q: want the id of rackd.machine=", clip(c.Machine))
	}
	if hw, err := net.ParseMAC(c.MAC); err != nil || len(hw) != 6 {
		return fmt.Errorf("mac %q is not a MAC address like 52:54:00:12:34:56", clip(c.MAC))
	}
	return nil
}

// Credential is a granted claim: the phase credential, for the reports'
// Authorization header.
type Credential struct {
	Token string `json:"token"`
	Phase string `json:"phase"`
	// BMCSetup asks the commissioning environment to set up the
	// machine's BMC in-band and report its credentials (Report.BMC):
	// rackd will store them, because the machine has no power
	// configuration an operator set (or the operator forced it).
	BMCSetup bool `json:"bmc_setup,omitempty"`
}

// ClaimCredential claims the machine's phase credential from the interface
// mac. It retries while rackd is unreachable or busy; a refusal (403, or
// 409 for a credential claimed already) is a *PermanentError and is not
// retried: the credential is handed out once per phase.
func (c *Client) ClaimCredential(ctx context.Context, machine, mac string) (Credential, error) {
	data, err := json.Marshal(CredentialRequest{Machine: machine, MAC: mac})
	if err != nil {
		return Credential{}, fmt.Errorf("encode credential request: %w", err)
	}
	var out Credential
	err = c.retry(ctx, "credential", func(ctx context.Context) error {
		status, body, err := c.do(ctx, http.MethodPost, PathCredential, data)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return refusal(status, body)
		}
		if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
			return fmt.Errorf("credential: unexpected answer %q", clip(string(body)))
		}
		return nil
	})
	return out, err
}

// Report is a phase report.
type Report struct {
	// Machine is the machine's id (rackd.machine=).
	Machine string `json:"machine"`
	// Error, when set, is why the phase failed: rackd fails the machine
	// with it as the reason. At most MaxReportError bytes are kept.
	Error string `json:"error,omitempty"`
	// Inventory is commissioning's full inventory.
	Inventory *Inventory `json:"inventory,omitempty"`
	// Disk, Bytes and SHA256 say what a deployment wrote where.
	Disk   string `json:"disk,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// WriteSeconds is how long the write took, from the image's download
	// answering to the disk synced: the deployment's own time, apart from
	// the power-on and boot before it (which rackd tells from the rest).
	WriteSeconds float64 `json:"write_seconds,omitempty"`
	// Erased names the disks an erase wiped.
	Erased []string `json:"erased,omitempty"`
	// BMC is what commissioning's in-band BMC set-up did, when rackd
	// asked for it (Credential.BMCSetup).
	BMC *BMCReport `json:"bmc,omitempty"`
}

// BMCReport is the BMC set-up's result: the user the environment created
// or updated on the machine's BMC, or why it could not. The password
// travels only here, over the phase credential; rackd keeps it with the
// machine's power parameters and never shows it.
type BMCReport struct {
	// Driver is the power driver the credentials are for ("ipmi").
	Driver   string `json:"driver"`
	Address  string `json:"address,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// Detail says what the set-up found and changed (user slot, channel,
	// address source); never a secret.
	Detail string `json:"detail,omitempty"`
	// Error, when set, is why the BMC was not set up; the commissioning
	// itself still succeeds.
	Error string `json:"error,omitempty"`
}

// Validate checks a BMC report: an IPMI address and credentials a BMC
// can hold, or an error.
func (b BMCReport) Validate() error {
	if b.Driver != "ipmi" {
		return fmt.Errorf("bmc.driver %q: want ipmi", clip(b.Driver))
	}
	if len(b.Error) > MaxReportError || len(b.Detail) > MaxReportError {
		return fmt.Errorf("bmc.error or bmc.detail is longer than %d bytes", MaxReportError)
	}
	if b.Error != "" {
		if b.Address != "" || b.Username != "" || b.Password != "" {
			return errors.New("bmc: a failed set-up reports no address or credentials")
		}
		return nil
	}
	if a, err := netip.ParseAddr(b.Address); err != nil || !a.Is4() || a.IsUnspecified() {
		return fmt.Errorf("bmc.address %q is not an IPv4 address", clip(b.Address))
	}
	if !bmcTextRE.MatchString(b.Username) || len(b.Username) > 16 {
		return errors.New("bmc.username: want 1 to 16 printable ASCII characters")
	}
	if !bmcTextRE.MatchString(b.Password) || len(b.Password) > 20 {
		return errors.New("bmc.password: want 1 to 20 printable ASCII characters")
	}
	return nil
}

var bmcTextRE = regexp.MustCompile(`^[!-~]+$`)

// ReportAnswer is rackd's answer to a report: the machine's state now and
// what the environment does next.
type ReportAnswer struct {
	State  string `json:"state"`
	Action Action `json:"action"`
}

// MaxReportError bounds a report's error text.
const MaxReportError = 1024

// MaxWriteSeconds bounds a report's write time: a week.
const MaxWriteSeconds = 7 * 24 * 3600

var machineIDRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Validate checks a report's fields (the inventory as Inventory.Validate).
func (r Report) Validate() error {
	if !machineIDRE.MatchString(r.Machine) {
		return fmt.Errorf("machine %q: want the id of rackd.machine=", clip(r.Machine))
	}
	if len(r.Error) > MaxReportError {
		return fmt.Errorf("error is longer than %d bytes", MaxReportError)
	}
	if r.Inventory != nil {
		if err := r.Inventory.Validate(); err != nil {
			return err
		}
	}
	if r.Bytes < 0 {
		return fmt.Errorf("bytes %d is negative", r.Bytes)
	}
	if !(r.WriteSeconds >= 0 && r.WriteSeconds <= MaxWriteSeconds) { // NaN fails too
		return fmt.Errorf("write_seconds %v: want 0 to %d", r.WriteSeconds, MaxWriteSeconds)
	}
	if len(r.Erased) > MaxDisks {
		return fmt.Errorf("erased: %d disks, at most %d", len(r.Erased), MaxDisks)
	}
	for _, d := range append([]string{r.Disk}, r.Erased...) {
		if d != "" && !diskNameRE.MatchString(d) {
			return fmt.Errorf("disk name %q: want a kernel device name like sda or nvme0n1", clip(d))
		}
	}
	if r.BMC != nil {
		if err := r.BMC.Validate(); err != nil {
			return err
		}
	}
	if r.SHA256 != "" && !sha256RE.MatchString(r.SHA256) {
		return fmt.Errorf("sha256 %q: want 64 lower-case hex digits", clip(r.SHA256))
	}
	return nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Report sends a phase report to path (PathCommissioned, ...) with the
// phase credential. It retries while rackd is unreachable or busy; a 401
// is permanent (the credential is wrong, used or expired).
func (c *Client) Report(ctx context.Context, path, token string, r Report) (ReportAnswer, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return ReportAnswer{}, fmt.Errorf("encode report: %w", err)
	}
	var out ReportAnswer
	err = c.retry(ctx, "report", func(ctx context.Context) error {
		status, body, err := c.doAuth(ctx, http.MethodPost, path, token, data)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return refusal(status, body)
		}
		if err := json.Unmarshal(body, &out); err != nil || !out.Action.Valid() {
			return fmt.Errorf("report: unexpected answer %q", clip(string(body)))
		}
		return nil
	})
	return out, err
}

// Final console lines of the phase modes (see the package documentation).
const (
	MarkerCommissioned = Prefix + "commissioned (" // + "<STATE>), powering off"
	MarkerDeployed     = Prefix + "deployed "      // + "<bytes> bytes to <disk>, rebooting"
	MarkerErased       = Prefix + "erased "        // + "<disks>, powering off"
	MarkerPhaseFailed  = Prefix + "phase failed: " // + "<mode>: <reason> (reported), powering off"
	// MarkerCredentialRefused starts the final line when rackd refused
	// the credential claim: + rackd's answer.
	MarkerCredentialRefused = MarkerFailed + "credential refused: "
)
