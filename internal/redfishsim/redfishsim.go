// Package redfishsim is a Redfish BMC for tests and benchmarks: an HTTPS
// server (a fresh self-signed certificate per simulator) with the DMTF
// resources a power driver touches: the service root, one ComputerSystem
// (PowerState, Boot override, the ComputerSystem.Reset action), one Manager,
// and the SessionService (X-Auth-Token sessions); HTTP basic auth works too.
// Representations carry ETags and PATCH honours If-Match.
//
// Its power can drive a process (Options.Machine: started while the power is
// on, the way the IPMI simulator powers a QEMU VM), and vendor quirks are
// switchable (Quirks): If-Match required on PATCH, writes redirected to a
// @Redfish.Settings object, the boot mode required in every boot PATCH, slow
// power transitions, injected 5xx answers, restricted AllowableValues.
//
// Typical use:
//
//	sim := redfishsim.Start(t, redfishsim.Options{})   // closed in t.Cleanup
//	target := power.Target{Driver: "redfish", Address: sim.URL, Username: sim.User, Password: sim.Password}
//	sim.Power()                                        // "On" or "Off", without Redfish
//	sim.Hang(); ...; sim.Resume()                      // a BMC that stops answering
//
// Real clients (redfishtool, python3-sushy) are run against it in its own
// tests: where they disagree with it, the simulator is wrong.
package redfishsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every ResetType DMTF defines for ComputerSystem.Reset.
var AllResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn", "PushPowerButton", "PowerCycle"}

// DefaultBootTargets are the boot override targets the system offers.
var DefaultBootTargets = []string{"None", "Pxe", "Hdd", "Cd", "BiosSetup", "UefiShell"}

// Quirks are vendor behaviours a BMC may have. The zero value is a
// well-behaved BMC.
type Quirks struct {
	// RequireIfMatch refuses a PATCH without If-Match (428), as iDRAC does
	// for some resources. A wrong If-Match is refused (412) in any mode.
	RequireIfMatch bool
	// SettingsObject redirects writes: the system names a
	// @Redfish.Settings object, PATCH on the system itself is refused
	// (405), and what is written to the settings object applies at the next
	// reset or power-on.
	SettingsObject bool
	// RequireBootMode refuses a Boot PATCH that does not carry
	// BootSourceOverrideMode (400), as some Supermicro and Dell firmware
	// does.
	RequireBootMode bool
	// PowerDelay makes power transitions slow: the state reads PoweringOn
	// or PoweringOff for this long.
	PowerDelay time.Duration
	// FlakeEvery, above 0, answers every FlakeEvery-th request with 503
	// (before doing anything); FailNext does it for a count of requests.
	FlakeEvery int
	// ResetTypes, when set, are the only ResetType values allowed (and
	// advertised); others are refused (400).
	ResetTypes []string
	// BootTargets, when set, replace DefaultBootTargets.
	BootTargets []string
	// NoSessions disables the SessionService (session creation is refused
	// with 405): clients must use basic auth.
	NoSessions bool
	// Latency is added to every request (benchmarks).
	Latency time.Duration
}

// Options configures one simulated BMC. The zero value is a BMC with user
// "admin", password "secret", power off, on 127.0.0.1 and a free port.
type Options struct {
	// Addr is host:port to listen on (a port of 0 picks a free one); empty
	// is 127.0.0.1 and a free port. The certificate names the host too.
	Addr           string
	User, Password string
	PowerOn        bool
	// BootMode is the system's current boot mode, "UEFI" (default) or
	// "Legacy".
	BootMode string
	Quirks   Quirks
	// Machine, when set, is started (in its own process group, output in a
	// log file, PID from MachinePID) when the power goes on; the power reads
	// on while it runs (it going away powers the system off); power off
	// sends its group SIGTERM, then SIGKILL after 3 s. Close kills it too.
	Machine []string
	// SessionTimeout ends sessions idle this long (default 30 min).
	SessionTimeout time.Duration
}

// Boot is the system's boot override as the simulator holds it.
type Boot struct {
	Enabled string // Disabled, Once, Continuous
	Target  string // None, Pxe, Hdd, ...
	Mode    string // UEFI, Legacy
}

// Stats counts what clients did, for tests.
type Stats struct {
	Requests         int
	SessionsCreated  int
	SessionsDeleted  int
	BasicAuth        int // requests authenticated with basic auth
	TokenAuth        int // requests authenticated with a session token
	Unauthorized     int // 401 answers
	Flakes           int // 503 answers injected
	PatchesWithMatch int // PATCHes that carried If-Match
	Resets           []string
}

// Sim is one running simulated BMC.
type Sim struct {
	URL      string // https://127.0.0.1:PORT
	Addr     string // 127.0.0.1:PORT
	User     string
	Password string

	srv *httptest.Server
	log string // the machine's output file

	mu          sync.Mutex
	opts        Options
	cert        *tls.Certificate
	fingerprint string
	on          bool      // power
	target      bool      // where a transition is going
	until       time.Time // transition ends then
	boot        Boot
	pending     *Boot // written to the settings object, applied at the next boot
	lastBoot    string
	boots       int
	version     int // ETag of the system
	sessions    map[string]*session
	nextSession int
	stats       Stats
	hung        chan struct{} // closed on Resume; nil when not hung
	failNext    int
	machine     *exec.Cmd
	machineDone chan struct{}
	closed      bool
}

type session struct {
	id       string
	token    string
	user     string
	lastUsed time.Time
}

// Start starts a simulator for a test and closes it in t.Cleanup.
func Start(t testing.TB, opts Options) *Sim {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("redfishsim: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("redfishsim %s: %v", s.Addr, err)
		}
	})
	return s
}

// New starts a simulator outside a test (benchmarks); the caller must Close
// it.
func New(opts Options) (*Sim, error) {
	if opts.User == "" {
		opts.User = "admin"
	}
	if opts.Password == "" {
		opts.Password = "secret"
	}
	if opts.BootMode == "" {
		opts.BootMode = "UEFI"
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	s := &Sim{User: opts.User, Password: opts.Password, opts: opts, sessions: map[string]*session{},
		boot: Boot{Enabled: "Disabled", Target: "None", Mode: opts.BootMode}, version: 1}
	if err := s.RotateCertificate(); err != nil {
		return nil, err
	}
	if len(opts.Machine) > 0 {
		f, err := os.CreateTemp("", "rackd-redfishsim-machine-*.log")
		if err != nil {
			return nil, fmt.Errorf("machine log: %w", err)
		}
		f.Close()
		s.log = f.Name()
	}
	if opts.PowerOn {
		s.mu.Lock()
		err := s.setPowerLocked(true, false)
		s.mu.Unlock()
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if opts.Addr != "" {
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("listen on %s: %w", opts.Addr, err)
		}
		s.srv.Listener.Close()
		s.srv.Listener = ln
	}
	// Our own TLS listener, not StartTLS: that serves httptest's fixed
	// certificate, and a test needs its BMC's certificate to be its own
	// (and to change, RotateCertificate).
	s.srv.Listener = tls.NewListener(s.srv.Listener, &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.cert, nil
		}})
	// Clients that probe and hang up (TLS handshake EOF) are not news.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Start()
	s.Addr = s.srv.Listener.Addr().String()
	s.URL = "https://" + s.Addr
	return s, nil
}

// RotateCertificate gives the BMC a new self-signed certificate (a BMC
// replaced, or reset to factory defaults), for new connections.
func (s *Sim) RotateCertificate() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "redfishsim BMC"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		// Its own CA, so that a client can be given it as the CA to trust.
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	if host, _, err := net.SplitHostPort(s.opts.Addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	sum := sha256.Sum256(der)
	s.mu.Lock()
	s.cert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	s.fingerprint = hex.EncodeToString(sum[:])
	s.mu.Unlock()
	if s.srv != nil {
		// Connections made before keep the old certificate otherwise.
		s.srv.CloseClientConnections()
	}
	return nil
}

// Fingerprint is the SHA-256 of the certificate's DER, in lower-case hex.
func (s *Sim) Fingerprint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fingerprint
}

// CertificateDER is the current certificate.
func (s *Sim) CertificateDER() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cert.Certificate[0])
}

// CertificatePEM is the current certificate in PEM, for clients that take
// a CA file.
func (s *Sim) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.CertificateDER()})
}

// Close stops the server and the machine process.
func (s *Sim) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
	s.mu.Unlock()
	if s.srv != nil {
		s.srv.CloseClientConnections()
		s.srv.Close()
	}
	s.mu.Lock()
	s.stopMachineLocked()
	s.mu.Unlock()
	if s.log != "" {
		os.Remove(s.log)
	}
	return nil
}

// SetQuirks switches the BMC's quirks.
func (s *Sim) SetQuirks(q Quirks) {
	s.mu.Lock()
	s.opts.Quirks = q
	s.version++
	s.mu.Unlock()
}

// FailNext answers the next n requests with 503.
func (s *Sim) FailNext(n int) {
	s.mu.Lock()
	s.failNext = n
	s.mu.Unlock()
}

// Hang makes the BMC accept connections and requests but answer none until
// Resume (each request waits until then or until its client gives up).
func (s *Sim) Hang() {
	s.mu.Lock()
	if s.hung == nil {
		s.hung = make(chan struct{})
	}
	s.mu.Unlock()
}

// Resume undoes Hang.
func (s *Sim) Resume() {
	s.mu.Lock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
	s.mu.Unlock()
}

// ForgetSessions drops every session, as a BMC reboot does.
func (s *Sim) ForgetSessions() {
	s.mu.Lock()
	s.sessions = map[string]*session{}
	s.mu.Unlock()
}

// Sessions is the number of open sessions.
func (s *Sim) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Stats returns the counters.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Resets = slices.Clone(s.stats.Resets)
	return st
}

// Power is the PowerState as the BMC reports it: On, Off, PoweringOn or
// PoweringOff.
func (s *Sim) Power() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.powerStateLocked()
}

// SetPower sets the power without Redfish (a button pressed by hand).
func (s *Sim) SetPower(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setPowerLocked(on, false)
}

// Boot is the boot override in effect (what a GET of the system shows).
func (s *Sim) Boot() Boot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boot
}

// PendingBoot is what was written to the settings object and not yet
// applied (nil when nothing is pending).
func (s *Sim) PendingBoot() *Boot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return nil
	}
	b := *s.pending
	return &b
}

// LastBoot is the override target the last boot used ("" for the firmware's
// order), and how many boots there were.
func (s *Sim) LastBoot() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastBoot, s.boots
}

// MachinePID is the PID of the running Options.Machine process (0 when none).
func (s *Sim) MachinePID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.machine == nil {
		return 0
	}
	return s.machine.Process.Pid
}

// MachineLog is the output of Options.Machine so far.
func (s *Sim) MachineLog() string {
	if s.log == "" {
		return ""
	}
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// ---- power ----

func (s *Sim) settleLocked() {
	if !s.until.IsZero() && !time.Now().Before(s.until) {
		s.until = time.Time{}
		s.on = s.target
	}
	if s.on && s.until.IsZero() && s.machineDone != nil {
		select {
		case <-s.machineDone:
			// The machine went away by itself (a VM shut down).
			s.machine, s.machineDone, s.on, s.target = nil, nil, false, false
			s.version++
		default:
		}
	}
}

func (s *Sim) powerStateLocked() string {
	s.settleLocked()
	switch {
	case !s.until.IsZero() && s.target:
		return "PoweringOn"
	case !s.until.IsZero():
		return "PoweringOff"
	case s.on:
		return "On"
	}
	return "Off"
}

// isOnLocked is where the power is (or is going).
func (s *Sim) isOnLocked() bool {
	s.settleLocked()
	if !s.until.IsZero() {
		return s.target
	}
	return s.on
}

// setPowerLocked moves the power to on; a boot happens when it goes on (or
// when reboot says so while it stays on).
func (s *Sim) setPowerLocked(on, reboot bool) error {
	was := s.isOnLocked()
	if was == on && !reboot {
		return nil
	}
	if was && (!on || reboot) {
		s.stopMachineLocked()
	}
	if on {
		s.bootLocked()
		if err := s.startMachineLocked(); err != nil {
			return err
		}
	}
	s.version++
	s.target = on
	if d := s.opts.Quirks.PowerDelay; d > 0 {
		s.on = was && !reboot
		s.until = time.Now().Add(d)
		if reboot {
			s.target = true
		}
		return nil
	}
	s.on, s.until = on, time.Time{}
	return nil
}

// bootLocked is one boot: the pending settings apply, a one-time override
// is used up.
func (s *Sim) bootLocked() {
	if s.pending != nil {
		s.boot = *s.pending
		s.pending = nil
	}
	s.boots++
	s.lastBoot = ""
	if s.boot.Enabled != "Disabled" && s.boot.Target != "None" {
		s.lastBoot = s.boot.Target
	}
	if s.boot.Enabled == "Once" {
		s.boot.Enabled, s.boot.Target = "Disabled", "None"
	}
}

func (s *Sim) startMachineLocked() error {
	if len(s.opts.Machine) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.log, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("machine log: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(s.opts.Machine[0], s.opts.Machine[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start machine: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.machine, s.machineDone = cmd, done
	return nil
}

// stopMachineLocked ends the machine's process group: SIGTERM, SIGKILL
// after 3 s. It waits (a real BMC's power off takes its time too).
func (s *Sim) stopMachineLocked() {
	if s.machine == nil {
		return
	}
	pid, done := s.machine.Process.Pid, s.machineDone
	s.machine, s.machineDone = nil, nil
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// ---- HTTP ----

const (
	root      = "/redfish/v1"
	systemID  = "/redfish/v1/Systems/1"
	settings  = "/redfish/v1/Systems/1/Settings"
	resetPath = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
	managerID = "/redfish/v1/Managers/1"
	sessColl  = "/redfish/v1/SessionService/Sessions"
)

type apiError struct {
	code   int
	msgID  string
	text   string
	header http.Header
}

func (e *apiError) Error() string { return e.text }

func fail(code int, msgID, format string, a ...any) *apiError {
	return &apiError{code: code, msgID: msgID, text: fmt.Sprintf(format, a...)}
}

func (s *Sim) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	hung, lat := s.hung, s.opts.Quirks.Latency
	s.stats.Requests++
	flake := false
	if s.failNext > 0 {
		s.failNext--
		flake = true
	} else if n := s.opts.Quirks.FlakeEvery; n > 0 && s.stats.Requests%n == 0 {
		flake = true
	}
	if flake {
		s.stats.Flakes++
	}
	s.mu.Unlock()
	if hung != nil {
		select {
		case <-hung:
		case <-r.Context().Done():
			return
		}
	}
	if lat > 0 {
		select {
		case <-time.After(lat):
		case <-r.Context().Done():
			return
		}
	}
	if flake {
		writeError(w, fail(http.StatusServiceUnavailable, "Base.1.8.ServiceTemporarilyUnavailable", "the service is temporarily unavailable (injected)"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, fail(http.StatusBadRequest, "Base.1.8.MalformedJSON", "read body: %v", err))
		return
	}
	res, hdr, aerr := s.route(r, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	if res == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("OData-Version", "4.0")
	code := http.StatusOK
	if c := hdr.Get("X-Sim-Status"); c != "" {
		code, _ = strconv.Atoi(c)
		w.Header().Del("X-Sim-Status")
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(res)
}

func writeError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(e.code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": "Base.1.8.GeneralError", "message": e.text,
		"@Message.ExtendedInfo": []map[string]any{{"MessageId": e.msgID, "Message": e.text, "Severity": "Warning"}},
	}})
}

func link(p string) map[string]string { return map[string]string{"@odata.id": p} }

func (s *Sim) route(r *http.Request, body []byte) (any, http.Header, *apiError) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	if p == "/redfish" {
		return map[string]string{"v1": root + "/"}, nil, nil
	}
	if p == root {
		if r.Method != http.MethodGet {
			return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "%s not allowed on the service root", r.Method)
		}
		return s.serviceRoot(), nil, nil
	}
	if p == root+"/odata" || p == root+"/$metadata" {
		return nil, nil, fail(http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "%s: not served by this simulator", p)
	}
	if p == sessColl && r.Method == http.MethodPost {
		return s.createSession(body)
	}
	if aerr := s.authenticate(r); aerr != nil {
		return nil, nil, aerr
	}
	switch {
	case p == root+"/Systems":
		return s.get(r, collection(root+"/Systems", "#ComputerSystemCollection.ComputerSystemCollection", systemID))
	case p == systemID:
		switch r.Method {
		case http.MethodGet:
			return s.system()
		case http.MethodPatch:
			s.mu.Lock()
			so := s.opts.Quirks.SettingsObject
			s.mu.Unlock()
			if so {
				return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed",
					"PATCH the settings object %s named in @Redfish.Settings, not the system", settings)
			}
			return s.patchBoot(r, body, false)
		}
		return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "%s not allowed on %s", r.Method, p)
	case p == settings:
		s.mu.Lock()
		so := s.opts.Quirks.SettingsObject
		s.mu.Unlock()
		if !so {
			return nil, nil, fail(http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "%s: no such resource", p)
		}
		switch r.Method {
		case http.MethodGet:
			return s.settingsObject()
		case http.MethodPatch:
			return s.patchBoot(r, body, true)
		}
		return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "%s not allowed on %s", r.Method, p)
	case p == resetPath:
		if r.Method != http.MethodPost {
			return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "actions take POST")
		}
		return s.reset(body)
	case p == root+"/Managers":
		return s.get(r, collection(root+"/Managers", "#ManagerCollection.ManagerCollection", managerID))
	case p == managerID:
		return s.get(r, map[string]any{
			"@odata.id": managerID, "@odata.type": "#Manager.v1_5_0.Manager", "Id": "1", "Name": "Manager",
			"ManagerType": "BMC", "FirmwareVersion": "redfishsim-1", "Status": map[string]string{"State": "Enabled", "Health": "OK"},
			"Links": map[string]any{"ManagerForServers": []any{link(systemID)}},
		})
	case p == root+"/SessionService":
		s.mu.Lock()
		enabled, timeout := !s.opts.Quirks.NoSessions, int(s.opts.SessionTimeout/time.Second)
		s.mu.Unlock()
		return s.get(r, map[string]any{
			"@odata.id": root + "/SessionService", "@odata.type": "#SessionService.v1_1_6.SessionService", "Id": "SessionService",
			"Name": "Session Service", "ServiceEnabled": enabled, "SessionTimeout": timeout, "Sessions": link(sessColl),
		})
	case p == sessColl:
		s.mu.Lock()
		var ids []string
		for _, se := range s.sessions {
			ids = append(ids, sessColl+"/"+se.id)
		}
		s.mu.Unlock()
		slices.Sort(ids)
		return s.get(r, collection(sessColl, "#SessionCollection.SessionCollection", ids...))
	case strings.HasPrefix(p, sessColl+"/"):
		return s.sessionMember(r, strings.TrimPrefix(p, sessColl+"/"))
	}
	return nil, nil, fail(http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "%s: no such resource", p)
}

func (s *Sim) get(r *http.Request, v any) (any, http.Header, *apiError) {
	if r.Method != http.MethodGet {
		return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "%s not allowed on %s", r.Method, r.URL.Path)
	}
	return v, nil, nil
}

func collection(id, typ string, members ...string) map[string]any {
	ms := []any{}
	for _, m := range members {
		ms = append(ms, link(m))
	}
	return map[string]any{"@odata.id": id, "@odata.type": typ, "Name": "Collection", "Members": ms, "Members@odata.count": len(ms)}
}

func (s *Sim) serviceRoot() map[string]any {
	return map[string]any{
		"@odata.id": root + "/", "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Id": "RootService", "Name": "Root Service",
		"RedfishVersion": "1.6.0", "UUID": "92384634-2938-2342-8820-489239905423",
		"Systems": link(root + "/Systems"), "Managers": link(root + "/Managers"),
		"SessionService": link(root + "/SessionService"), "Links": map[string]any{"Sessions": link(sessColl)},
	}
}

// authenticate accepts a live session token or basic auth.
func (s *Sim) authenticate(r *http.Request) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		for id, se := range s.sessions {
			if time.Since(se.lastUsed) > s.opts.SessionTimeout {
				delete(s.sessions, id)
				continue
			}
			if subtle.ConstantTimeCompare([]byte(se.token), []byte(tok)) == 1 {
				se.lastUsed = time.Now()
				s.stats.TokenAuth++
				return nil
			}
		}
	} else if u, p, ok := r.BasicAuth(); ok && s.credentialsOK(u, p) {
		s.stats.BasicAuth++
		return nil
	}
	s.stats.Unauthorized++
	e := fail(http.StatusUnauthorized, "Base.1.8.NoValidSession", "authentication required: no valid session token or basic credentials")
	e.header = http.Header{"Www-Authenticate": {`Basic realm="redfishsim"`}}
	return e
}

func (s *Sim) credentialsOK(u, p string) bool {
	return subtle.ConstantTimeCompare([]byte(u), []byte(s.opts.User))&subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) == 1
}

func (s *Sim) createSession(body []byte) (any, http.Header, *apiError) {
	var req struct {
		UserName string
		Password string
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.MalformedJSON", "session request: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Quirks.NoSessions {
		return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "sessions are disabled on this BMC")
	}
	if !s.credentialsOK(req.UserName, req.Password) {
		s.stats.Unauthorized++
		return nil, nil, fail(http.StatusUnauthorized, "Base.1.8.InsufficientPrivilege", "wrong user name or password")
	}
	b := make([]byte, 16)
	rand.Read(b)
	s.nextSession++
	se := &session{id: strconv.Itoa(s.nextSession), token: hex.EncodeToString(b), user: req.UserName, lastUsed: time.Now()}
	s.sessions[se.id] = se
	s.stats.SessionsCreated++
	loc := sessColl + "/" + se.id
	return sessionView(se), http.Header{"X-Auth-Token": {se.token}, "Location": {loc}, "X-Sim-Status": {"201"}}, nil
}

func sessionView(se *session) map[string]any {
	return map[string]any{"@odata.id": sessColl + "/" + se.id, "@odata.type": "#Session.v1_1_0.Session",
		"Id": se.id, "Name": "User Session", "UserName": se.user}
}

func (s *Sim) sessionMember(r *http.Request, id string) (any, http.Header, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[id]
	if se == nil {
		return nil, nil, fail(http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no session %s", id)
	}
	switch r.Method {
	case http.MethodGet:
		return sessionView(se), nil, nil
	case http.MethodDelete:
		delete(s.sessions, id)
		s.stats.SessionsDeleted++
		return nil, nil, nil
	}
	return nil, nil, fail(http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "%s not allowed on a session", r.Method)
}

func (s *Sim) etagLocked() string { return fmt.Sprintf(`W/"%d"`, s.version) }

func (s *Sim) resetTypesLocked() []string {
	if len(s.opts.Quirks.ResetTypes) > 0 {
		return s.opts.Quirks.ResetTypes
	}
	return AllResetTypes
}

func (s *Sim) bootTargetsLocked() []string {
	if len(s.opts.Quirks.BootTargets) > 0 {
		return s.opts.Quirks.BootTargets
	}
	return DefaultBootTargets
}

func (s *Sim) system() (any, http.Header, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	etag := s.etagLocked()
	sys := map[string]any{
		"@odata.id": systemID, "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem", "@odata.etag": etag,
		"Id": "1", "Name": "System", "SystemType": "Physical", "Manufacturer": "rackd", "Model": "redfishsim",
		"PowerState": s.powerStateLocked(),
		"Status":     map[string]string{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled":                        s.boot.Enabled,
			"BootSourceOverrideTarget":                         s.boot.Target,
			"BootSourceOverrideMode":                           s.boot.Mode,
			"BootSourceOverrideTarget@Redfish.AllowableValues": s.bootTargetsLocked(),
			"BootSourceOverrideMode@Redfish.AllowableValues":   []string{"UEFI", "Legacy"},
		},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": resetPath, "ResetType@Redfish.AllowableValues": s.resetTypesLocked(),
		}},
		"Links": map[string]any{"ManagedBy": []any{link(managerID)}},
	}
	if s.opts.Quirks.SettingsObject {
		sys["@Redfish.Settings"] = map[string]any{
			"@odata.type": "#Settings.v1_2_0.Settings", "SettingsObject": link(settings),
			"SupportedApplyTimes": []string{"OnReset"},
		}
	}
	return sys, http.Header{"Etag": {etag}}, nil
}

func (s *Sim) settingsObject() (any, http.Header, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boot
	if s.pending != nil {
		b = *s.pending
	}
	etag := s.etagLocked()
	return map[string]any{
		"@odata.id": settings, "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem", "@odata.etag": etag, "Id": "Settings", "Name": "Pending settings",
		"Boot": map[string]any{"BootSourceOverrideEnabled": b.Enabled, "BootSourceOverrideTarget": b.Target, "BootSourceOverrideMode": b.Mode},
	}, http.Header{"Etag": {etag}}, nil
}

// patchBoot applies a PATCH of the Boot object, to the system or (toPending)
// to the settings object.
func (s *Sim) patchBoot(r *http.Request, body []byte, toPending bool) (any, http.Header, *apiError) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.MalformedJSON", "PATCH body: %v", err)
	}
	s.mu.Lock()
	match := r.Header.Get("If-Match")
	if match != "" {
		s.stats.PatchesWithMatch++
		if match != "*" && match != s.etagLocked() && strings.TrimPrefix(match, "W/") != strings.TrimPrefix(s.etagLocked(), "W/") {
			s.mu.Unlock()
			return nil, nil, fail(http.StatusPreconditionFailed, "Base.1.8.PreconditionFailed", "If-Match %s does not match the ETag %s", match, s.etagLocked())
		}
	} else if s.opts.Quirks.RequireIfMatch {
		s.mu.Unlock()
		return nil, nil, fail(http.StatusPreconditionRequired, "Base.1.8.PreconditionRequired", "this BMC requires If-Match on PATCH")
	}
	s.mu.Unlock()
	rawBoot, ok := req["Boot"]
	for k := range req {
		if k != "Boot" && !strings.HasPrefix(k, "@") {
			return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyNotWritable", "property %s is not writable here", k)
		}
	}
	if !ok {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyMissing", "nothing to change: no Boot")
	}
	var boot map[string]json.RawMessage
	if err := json.Unmarshal(rawBoot, &boot); err != nil {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyValueTypeError", "Boot: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nb := s.boot
	if s.pending != nil && toPending {
		nb = *s.pending
	}
	for k, raw := range boot {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyValueTypeError", "Boot.%s: want a string", k)
		}
		var allowed []string
		var dst *string
		switch k {
		case "BootSourceOverrideEnabled":
			allowed, dst = []string{"Disabled", "Once", "Continuous"}, &nb.Enabled
		case "BootSourceOverrideTarget":
			allowed, dst = s.bootTargetsLocked(), &nb.Target
		case "BootSourceOverrideMode":
			allowed, dst = []string{"UEFI", "Legacy"}, &nb.Mode
		default:
			return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyNotWritable", "Boot.%s is not writable", k)
		}
		if !slices.Contains(allowed, v) {
			return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyValueNotInList", "Boot.%s %q: not one of %s", k, v, strings.Join(allowed, ", "))
		}
		*dst = v
	}
	if _, ok := boot["BootSourceOverrideMode"]; !ok && s.opts.Quirks.RequireBootMode {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.PropertyMissing", "this BMC requires Boot.BootSourceOverrideMode with every boot change")
	}
	if toPending {
		s.pending = &nb
	} else {
		s.boot = nb
	}
	s.version++
	return nil, http.Header{"Etag": {s.etagLocked()}}, nil
}

func (s *Sim) reset(body []byte) (any, http.Header, *apiError) {
	var req struct{ ResetType string }
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.MalformedJSON", "reset body: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.resetTypesLocked(), req.ResetType) {
		return nil, nil, fail(http.StatusBadRequest, "Base.1.8.ActionParameterNotSupported",
			"ResetType %q is not supported by this BMC: one of %s", req.ResetType, strings.Join(s.resetTypesLocked(), ", "))
	}
	s.stats.Resets = append(s.stats.Resets, req.ResetType)
	on := s.isOnLocked()
	var err error
	switch req.ResetType {
	case "On", "ForceOn":
		err = s.setPowerLocked(true, false)
	case "ForceOff", "GracefulShutdown":
		err = s.setPowerLocked(false, false)
	case "PushPowerButton":
		err = s.setPowerLocked(!on, false)
	case "PowerCycle":
		// Off then on; from off it just powers on.
		err = s.setPowerLocked(true, on)
	case "ForceRestart", "GracefulRestart":
		if !on {
			return nil, nil, fail(http.StatusConflict, "Base.1.8.ActionNotSupported", "%s: the system is off", req.ResetType)
		}
		err = s.setPowerLocked(true, true)
	case "Nmi":
	}
	if err != nil {
		return nil, nil, fail(http.StatusInternalServerError, "Base.1.8.InternalError", "%v", err)
	}
	return nil, nil, nil
}
