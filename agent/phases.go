package agent

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/api"
	"rackd/enlist"
	"rackd/internal/atomicfile"
	"rackd/netboot/bootconf"
	"rackd/store"
)

// The phase reports of the commissioning, deploy and erase environments:
// authenticated by the machine's phase credential, which the environment
// claims once as it starts (POST /metadata/v1/credential, from the address
// of its DHCP binding: store/credclaim.go) and the store checks and
// consumes with the report (store/phases.go).

// CredentialKeyFile is, inside the state directory, the key that derives
// the machines' phase credentials. It lives outside the database so that a
// copy of the database (a backup) cannot forge a report.
const CredentialKeyFile = "credential.key"

// loadCredentialKey reads the key, creating it (32 random bytes, 0600) on
// first start: whole, so that a crash cannot leave a short key that stops
// the next start, and durably, so that the machines' credentials derived
// from it survive a power cut.
func loadCredentialKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, CredentialKeyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) >= 32:
		return b, nil
	case err == nil:
		return nil, fmt.Errorf("credential key %s is %d bytes, want 32: remove it to make a new one (machines mid-phase then need their action again)", path, len(b))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read credential key: %w", err)
	}
	b = make([]byte, 32)
	rand.Read(b)
	// NoReplace: if another rackd on this directory created a key in the
	// meantime, it is the key, and this start fails rather than replace it.
	if err := atomicfile.WriteFile(path, b, atomicfile.Options{Perm: 0o600, NoReplace: true}); err != nil {
		return nil, fmt.Errorf("create credential key: %w", err)
	}
	return b, nil
}

// phaseMetrics are the series of the commissioning, deploy and erase phases.
type phaseMetrics struct {
	duration *prometheus.HistogramVec
	failures *prometheus.CounterVec
	reports  *prometheus.CounterVec
}

func newPhaseMetrics(reg prometheus.Registerer) *phaseMetrics {
	m := &phaseMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "phase", Name: "duration_seconds",
			Help: "Time machines spent in COMMISSIONING, DEPLOYING or an erasing release, by phase (commission, deploy, erase) " +
				"and outcome (done, failed).",
			Buckets: []float64{10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200},
		}, []string{"phase", "outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "phase", Name: "failures_total",
			Help: "Phases that failed, by phase and reason: reported (the environment said why), power " +
				"(rackd could not power the machine on or off: the BMC's error is in the machine's events), timeout (the watchdog).",
		}, []string{"phase", "reason"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "metadata", Name: "reports_total",
			Help: "Phase reports of the environments, by phase and outcome: done, image_written (the deployed OS reports next), " +
				"failed, replayed, rejected (a token that is not the credential of a machine in that phase: refused, " +
				"recorded as an event on the machine, which stays in its phase), unauthorized (no token, or no machine in that phase), " +
				"bad_request, error.",
		}, []string{"phase", "outcome"}),
	}
	for _, p := range []string{store.PhaseCommission, store.PhaseDeploy, store.PhaseErase} {
		for _, r := range []string{"reported", "power", "timeout"} {
			m.failures.WithLabelValues(p, r)
		}
		for _, o := range []string{"done", "failed"} {
			m.duration.WithLabelValues(p, o)
		}
	}
	reg.MustRegister(m.duration, m.failures, m.reports)
	return m
}

// observePhase records the end of a phase.
func (a *Agent) observePhase(phase string, since time.Time, failed bool, reason string) {
	pm := a.phases
	if pm == nil || phase == "" {
		return
	}
	outcome := "done"
	if failed {
		outcome = "failed"
		pm.failures.WithLabelValues(phase, reason).Inc()
	}
	if !since.IsZero() {
		pm.duration.WithLabelValues(phase, outcome).Observe(time.Since(since).Seconds())
	}
}

func (a *Agent) reportCommissioned(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	a.phaseReport(w, r, store.PhaseCommission)
}

func (a *Agent) reportDeployed(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	a.phaseReport(w, r, store.PhaseDeploy)
}

func (a *Agent) reportErased(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	a.phaseReport(w, r, store.PhaseErase)
}

// phaseReport is the three report endpoints: the Bearer token is the
// machine's phase credential (not a user's token), checked and consumed by
// the store in the transaction that moves the machine.
func (a *Agent) phaseReport(w http.ResponseWriter, r *http.Request, phase string) {
	if !a.limitMetadata(w, r, "report_"+phase) {
		return
	}
	outcome := "error"
	defer func() { a.phases.reports.WithLabelValues(phase, outcome).Inc() }()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		outcome = "unauthorized"
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized,
			"missing credential: send Authorization: Bearer <the token POST "+enlist.PathCredential+" granted>")
		return
	}
	var rep enlist.Report
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.Enlist.MaxBodyBytes)
	if a.decodeBody(w, r, &rep, false) != nil {
		outcome = "bad_request"
		return
	}
	req, err := reportRequest(rep, phase, strings.TrimSpace(token))
	if err != nil {
		outcome = "bad_request"
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	req.Source = r.RemoteAddr
	// The environment printed what it did (or why it failed) before it
	// reported: let its console deliver that before the phase ends (the
	// recording stops with it) and a failure event takes its tail.
	a.recorder.settle(r.Context(), rep.Machine)
	res, err := a.store.Report(r.Context(), req)
	if err != nil {
		outcome = a.reportRefused(w, r, phase, rep.Machine, res, err)
		return
	}
	outcome = reportOutcome(res, rep.Error)
	a.reportApplied(phase, outcome, res, rep.Error)
	m := res.Machine
	a.log.Info("phase report", "phase", phase, "machine", m.ID, "hostname", m.Hostname, "state", m.State,
		"outcome", outcome, "error", rep.Error, "source", r.RemoteAddr)
	writeJSON(w, http.StatusOK, reportAnswer(m))
}

// claimCredential is POST /metadata/v1/credential: the environment of a
// machine in a phase claims the phase's credential, once, from the address
// of its DHCP binding (unless metadata.credential_binding is "none"). The
// store decides and records the claim, and the events of refusals, in one
// transaction; the rate limit bounds how many refusals a stranger can make
// it write.
func (a *Agent) claimCredential(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if !a.limitMetadata(w, r, "credential") {
		return
	}
	outcome := "error"
	defer func() { a.metrics.metadata.WithLabelValues("credential", outcome).Inc() }()
	var req enlist.CredentialRequest
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.Enlist.MaxBodyBytes)
	if a.decodeBody(w, r, &req, false) != nil {
		outcome = "bad_request"
		return
	}
	if err := req.Validate(); err != nil {
		outcome = "bad_request"
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "invalid credential request: "+err.Error())
		return
	}
	var src netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		src = ap.Addr().Unmap()
	}
	res, err := a.store.ClaimCredential(r.Context(), store.CredentialClaim{Machine: req.Machine, MAC: req.MAC, Source: src,
		AnySource: a.cfg.Metadata.CredentialBinding == BindingNone})
	switch store.CodeOf(err) {
	case "":
		if err != nil {
			a.internalError(w, r, err)
			return
		}
	case store.CodeForbidden:
		outcome = "refused"
		a.log.Warn("credential claim refused", "machine", req.Machine, "mac", req.MAC, "source", r.RemoteAddr)
		writeError(w, http.StatusForbidden, api.CodeForbidden, err.Error())
		return
	case store.CodeConflict:
		outcome = "conflict"
		a.log.Warn("credential claimed again: refused", "machine", req.Machine, "mac", req.MAC, "source", r.RemoteAddr)
		writeError(w, http.StatusConflict, api.CodeConflict, err.Error())
		return
	default:
		a.storeError(w, r, err)
		return
	}
	outcome = "granted"
	m := res.Machine
	a.log.Info("credential claimed", "phase", res.Phase, "machine", m.ID, "hostname", m.Hostname, "mac", req.MAC,
		"source", r.RemoteAddr)
	writeJSON(w, http.StatusOK, enlist.Credential{Token: res.Token, Phase: res.Phase, BMCSetup: res.BMCSetup})
}

// reportRequest translates an environment's report of phase into the
// store's, or says what is wrong with it.
func reportRequest(rep enlist.Report, phase, token string) (store.PhaseReport, error) {
	if err := rep.Validate(); err != nil {
		return store.PhaseReport{}, fmt.Errorf("invalid report: %w", err)
	}
	req := store.PhaseReport{Machine: rep.Machine, Phase: phase, Token: token, Error: rep.Error}
	if rep.BMC != nil && phase != store.PhaseCommission {
		return store.PhaseReport{}, errors.New("only a commissioning report carries a BMC set-up")
	}
	switch phase {
	case store.PhaseCommission:
		if rep.Error == "" && rep.Inventory == nil {
			return store.PhaseReport{}, errors.New("a commissioning report carries the inventory, or an error")
		}
		if inv := rep.Inventory; inv != nil {
			ci := &store.CommissionInventory{Arch: inv.Arch, MACs: inv.MACs, CPUCount: inv.CPUCount, MemoryMB: inv.MemoryMB,
				SystemUUID: inv.DMI.UUID, Inventory: store.Inventory{Vendor: inv.DMI.Vendor, Product: inv.DMI.Product,
					Serial: inv.DMI.Serial, BMCAddress: inv.BMCAddress}}
			for _, d := range inv.Disks {
				ci.Inventory.Disks = append(ci.Inventory.Disks, store.Disk(d))
			}
			req.Inventory = ci
		}
		if b := rep.BMC; b != nil {
			req.BMC = &store.BMCSetup{Driver: b.Driver, Address: b.Address, Username: b.Username, Password: b.Password,
				Detail: b.Detail, Error: b.Error}
		}
	case store.PhaseDeploy:
		req.Bytes = rep.Bytes
		req.WriteTime = time.Duration(rep.WriteSeconds * float64(time.Second))
		if rep.Disk != "" {
			req.Detail = fmt.Sprintf("%d bytes to %s, sha256 %s", rep.Bytes, rep.Disk, rep.SHA256)
		}
	case store.PhaseErase:
		if len(rep.Erased) > 0 {
			req.Detail = "erased " + strings.Join(rep.Erased, " ")
		}
	}
	return req, nil
}

// reportRefused answers a report the store did not apply as asked and
// returns the outcome for the metrics. A refused credential changes no
// machine (a wrong one for a machine in its phase is an event on it: res
// says so), whoever sent it.
func (a *Agent) reportRefused(w http.ResponseWriter, r *http.Request, phase, machine string, res store.ReportResult, err error) string {
	if store.CodeOf(err) == store.CodeUnauthorized {
		outcome := "unauthorized"
		if res.Rejected {
			outcome = "rejected"
		}
		a.log.Warn("phase report refused", "phase", phase, "machine", machine, "source", r.RemoteAddr, "outcome", outcome, "err", err)
		writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, err.Error())
		return outcome
	}
	a.storeError(w, r, err)
	if store.CodeOf(err) != "" {
		return "bad_request"
	}
	return "error"
}

// reportOutcome names what an applied report did: image_written (a
// deployment whose OS reports itself next), replayed (the same report
// again, nothing changed), failed (as reported, or refused by the store: an
// inventory that contradicts the rack) or done.
func reportOutcome(res store.ReportResult, reportedError string) string {
	switch {
	case res.DiskWritten:
		return "image_written"
	case res.Action == "":
		return "replayed"
	case reportedError != "" || res.Action == store.ActionCommissioningFailed || res.Action == store.ActionDeploymentFailed:
		return "failed"
	}
	return "done"
}

// reportApplied records what an applied report did: the phase's metrics and
// the transition.
func (a *Agent) reportApplied(phase, outcome string, res store.ReportResult, reportedError string) {
	switch outcome {
	case "failed":
		a.observePhase(phase, res.Since, true, "reported")
	case "done":
		a.observePhase(phase, res.Since, false, "")
	}
	if res.Action == "" {
		return
	}
	m := res.Machine
	a.transitioned(m, res.Action, store.ReportActor)
	if res.Action == store.ActionReleaseDone {
		a.log.Info("machine released after erase", "machine", m.ID, "hostname", m.Hostname, "error", reportedError)
	}
}

// reportAnswer tells the environment what to do next: a machine whose image
// is written reboots into its new system (rackd now answers "boot from local
// disk"), whether it waits for that system to report (DEPLOYING) or is
// DEPLOYED already; every other end powers off, which the power policy also
// does through the BMC. Which is which is the boot decision's
// (bootconf.Decide), the one every boot config and whoami answer follow.
func reportAnswer(m store.Machine) enlist.ReportAnswer {
	ans := enlist.ReportAnswer{State: string(m.State), Action: enlist.ActionPowerOff}
	if bootconf.Decide(machineInfo(m), true, bootconf.Environments{}).InstalledOS {
		ans.Action = enlist.ActionReboot
	}
	return ans
}
