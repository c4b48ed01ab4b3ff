package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/api"
	"rackd/enlist"
	"rackd/store"
)

// Deployments as the API and the deployed OS see them: the deploy request's
// identity (user-data, SSH keys), the owner's view of the deployment, and
// the two endpoints the deployed OS's cloud-init reports to. The rules are
// the store's (store/deployments.go); the threat model of the OS endpoints
// is in docs/ARCHITECTURE.md section 7.

// deployBodyLimit is the body a deploy request may have: MaxUserData of
// user-data in base64, and room for SSH keys.
var deployBodyLimit = int64(base64.StdEncoding.EncodedLen(store.MaxUserData)) + 1<<20

// Bounds of what the deployed OS sends.
const (
	// maxPhoneHomeBody: phone_home's form (instance_id, hostname, fqdn
	// and, when asked, the host keys).
	maxPhoneHomeBody = 64 << 10
	// maxOSEventBody: one webhook event of cloud-init (its description
	// may carry a traceback).
	maxOSEventBody = 256 << 10
)

// osMetrics are the series of the deployed OS's reports and of the seed.
type osMetrics struct {
	reports *prometheus.CounterVec
	boot    prometheus.Histogram
	seeds   *prometheus.CounterVec
}

func newOSMetrics(reg prometheus.Registerer) *osMetrics {
	m := &osMetrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "metadata", Name: "os_reports_total",
			Help: "Reports of deployed operating systems, by endpoint (phone_home, events) and outcome: deployed, " +
				"refused (a replay or a deployment that ended), kept (a cloud-init error recorded), dropped (an event that is no error), " +
				"forbidden (not a current deployment's credential), bad_request, error.",
		}, []string{"endpoint", "outcome"}),
		boot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "deploy", Name: "os_boot_seconds",
			Help:    "Time from the image written to the deployed OS's report that cloud-init finished.",
			Buckets: []float64{15, 30, 45, 60, 90, 120, 180, 300, 600, 1200},
		}),
		seeds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "metadata", Name: "seed_requests_total",
			Help: "Seed requests of the deploy environment, by outcome: served, unauthorized, conflict (the image is written), error.",
		}, []string{"outcome"}),
	}
	for _, o := range []string{"deployed", "refused", "forbidden", "bad_request", "error"} {
		m.reports.WithLabelValues("phone_home", o)
	}
	for _, o := range []string{"kept", "dropped", "forbidden", "bad_request", "error"} {
		m.reports.WithLabelValues("events", o)
	}
	for _, o := range []string{"served", "unauthorized", "conflict", "error"} {
		m.seeds.WithLabelValues(o)
	}
	reg.MustRegister(m.reports, m.boot, m.seeds)
	return m
}

// redactPath is a request path fit for the log: the credential in the path
// of the OS endpoints is left out.
func redactPath(p string) string {
	rest, ok := strings.CutPrefix(p, enlist.PathOSPrefix)
	if !ok {
		return p
	}
	_, tail, _ := strings.Cut(rest, "/")
	if tail != "" {
		tail = "/" + tail
	}
	return enlist.PathOSPrefix + "<credential>" + tail
}

// decodeUserData decodes a deploy request's user_data: standard, canonical base64,
// line breaks allowed (base64(1) wraps its output). The status says how it
// is refused: 400 for what is not base64, 413 for too much.
func decodeUserData(s string) ([]byte, int, error) {
	if s == "" {
		return nil, 0, nil
	}
	s = strings.NewReplacer("\n", "", "\r", "").Replace(s)
	if base64.StdEncoding.DecodedLen(len(s)) > store.MaxUserData+2 {
		return nil, http.StatusRequestEntityTooLarge,
			fmt.Errorf("user_data is larger than %d bytes decoded", store.MaxUserData)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("user_data is not base64: %v", err)
	}
	if len(b) > store.MaxUserData {
		return nil, http.StatusRequestEntityTooLarge,
			fmt.Errorf("user_data is %d bytes decoded: at most %d", len(b), store.MaxUserData)
	}
	return b, 0, nil
}

// deploy is the deploy action with the deployment's identity.
func (a *Agent) deploy(w http.ResponseWriter, r *http.Request, who store.Actor, req api.ActionRequest) {
	ud, status, err := decodeUserData(req.UserData)
	if err != nil {
		code := api.CodeBadRequest
		if status == http.StatusRequestEntityTooLarge {
			code = api.CodeBodyTooLarge
		}
		writeError(w, status, code, err.Error())
		return
	}
	m, err := a.deployMachine(r.Context(), who, store.DeployRequest{Machine: r.PathValue("id"), Image: req.Image,
		Reason: req.Reason, UserData: ud, SSHKeys: req.SSHKeys})
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	v := a.machineViewFor(m, who)
	if d := v.Deployment; d != nil {
		a.log.Info("deployment started", "machine", m.ID, "hostname", m.Hostname, "instance_id", d.InstanceID,
			"image", d.Image, "ssh_keys", d.SSHKeys, "user_data_bytes", d.UserDataBytes, "by", who.Name)
	}
	v.Notice = manualNotice(m)
	writeJSON(w, http.StatusOK, v)
}

// machineViewFor is machineView with what only the machine's owner and
// admins see: its deployment.
func (a *Agent) machineViewFor(m store.Machine, who store.Actor) api.Machine {
	v := a.machineView(m)
	if !who.Admin && (m.Owner == "" || m.Owner != who.Name) {
		return v
	}
	d, err := a.store.DeploymentOf(who, m.ID)
	switch c := store.CodeOf(err); {
	case err == nil:
		v.Deployment = deploymentView(d)
	case c != store.CodeNotFound && c != store.CodeForbidden:
		a.log.Warn("read deployment", "machine", m.ID, "err", err)
	}
	return v
}

func deploymentView(d store.Deployment) *api.Deployment {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v := &api.Deployment{InstanceID: d.InstanceID, Image: d.Image, UserDataBytes: d.UserDataBytes,
		SSHKeys: len(d.SSHKeys), Started: d.Started, SeedServed: at(d.SeedServed), ImageWritten: at(d.ImageWritten),
		OSBooted: at(d.OSBooted), OSErrors: []api.OSError{}, OSErrorsDropped: d.OSErrorsDropped}
	for _, e := range d.OSErrors {
		v.OSErrors = append(v.OSErrors, api.OSError(e))
	}
	return v
}

// userData is GET /api/v1/machines/{id}/user-data: the owner's and the
// admins' only.
func (a *Agent) userData(w http.ResponseWriter, r *http.Request, who store.Actor) {
	ud, err := a.store.UserData(who, r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.UserData{UserData: base64.StdEncoding.EncodeToString(ud), Bytes: len(ud)})
}

// sourceOf is the caller's address for events.
func sourceOf(r *http.Request) string {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().String()
	}
	return "unknown"
}

// osPhoneHome is POST /metadata/v1/os/{token}/phone-home: cloud-init's
// phone_home module, form-encoded, at the end of its final stage. The
// token in the path is the deployment's OS credential.
func (a *Agent) osPhoneHome(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if !a.limitMetadata(w, r, "os_phone_home") {
		return
	}
	outcome := "error"
	defer func() { a.osm.reports.WithLabelValues("phone_home", outcome).Inc() }()
	body, done, ok := a.readBody(w, r, maxPhoneHomeBody)
	if !ok {
		outcome = "bad_request"
		return
	}
	var form url.Values
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" {
		var err error
		if form, err = url.ParseQuery(string(body)); err != nil {
			done()
			outcome = "bad_request"
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, "phone-home body is not a form: "+err.Error())
			return
		}
	}
	done()
	res, err := a.store.OSPhoneHome(r.Context(), store.PhoneHome{Token: r.PathValue("token"),
		InstanceID: form.Get("instance_id"), Source: sourceOf(r)})
	switch store.CodeOf(err) {
	case "":
	case store.CodeForbidden:
		outcome = "forbidden"
		a.log.Warn("OS report refused", "endpoint", "phone-home", "source", r.RemoteAddr, "err", err)
		writeError(w, http.StatusForbidden, api.CodeForbidden, err.Error())
		return
	case store.CodeConflict:
		outcome = "refused"
		a.log.Warn("OS report refused", "endpoint", "phone-home", "machine", res.Machine.ID, "source", r.RemoteAddr, "err", err)
		writeError(w, http.StatusConflict, api.CodeConflict, err.Error())
		return
	default:
		a.storeError(w, r, err)
		return
	}
	outcome = "deployed"
	m := res.Machine
	a.observePhase(store.PhaseDeploy, res.Since, false, "")
	if !res.Written.IsZero() {
		a.osm.boot.Observe(time.Since(res.Written).Seconds())
	}
	a.transitioned(m, res.Action, store.OSActor)
	a.log.Info("deployed OS reported", "machine", m.ID, "hostname", m.Hostname, "state", m.State, "source", r.RemoteAddr)
	writeJSON(w, http.StatusOK, enlist.ReportAnswer{State: string(m.State)})
}

// osEvent is one event of cloud-init's webhook reporter (its JSON; fields
// not named here are ignored, the reporter's set grows with its versions).
type osEvent struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	EventType   string  `json:"event_type"`
	Origin      string  `json:"origin"`
	Timestamp   float64 `json:"timestamp"`
	Result      string  `json:"result"`
}

// osEvents is POST /metadata/v1/os/{token}/events: cloud-init's webhook
// reporter posts every start and finish of its stages and modules here;
// errors and warnings are kept on the deployment. Not rate-limited per
// source: one boot posts a hundred events in seconds, and what is not an
// error costs one read.
func (a *Agent) osEvents(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	outcome := "error"
	defer func() { a.osm.reports.WithLabelValues("events", outcome).Inc() }()
	var ev osEvent
	body, done, ok := a.readBody(w, r, maxOSEventBody)
	if !ok {
		outcome = "bad_request"
		return
	}
	err := json.NewDecoder(bytes.NewReader(body)).Decode(&ev)
	done()
	if err != nil {
		outcome = "bad_request"
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "event is not JSON: "+err.Error())
		return
	}
	kept, err := a.store.OSEvent(r.Context(), store.OSEventReport{Token: r.PathValue("token"), Name: ev.Name,
		Description: ev.Description, EventType: ev.EventType, Result: ev.Result})
	switch store.CodeOf(err) {
	case "":
	case store.CodeForbidden:
		outcome = "forbidden"
		a.log.Warn("OS report refused", "endpoint", "events", "source", r.RemoteAddr, "err", err)
		writeError(w, http.StatusForbidden, api.CodeForbidden, err.Error())
		return
	default:
		a.storeError(w, r, err)
		return
	}
	outcome = "dropped"
	if kept {
		outcome = "kept"
		a.log.Warn("deployed OS reported an error", "name", cut(ev.Name, 200), "result", ev.Result, "source", r.RemoteAddr)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"kept": kept})
}

// cut bounds a text for the log.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
