package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"rackd/api"
	"rackd/appliance"
	"rackd/store"
)

// ExitRequest is what Serve returns when rackd stopped because a request
// asked the process to end with a particular exit code: after an appliance
// update is armed, or a factory reset requested, rackd exits with
// appliance.ExitReboot and the appliance's init reboots. The command line
// exits with Code (cli.Main reads ExitCode); nothing deeper calls os.Exit.
type ExitRequest struct {
	Code   int
	Reason string
}

func (e *ExitRequest) Error() string { return e.Reason }

// ExitCode is the process exit code asked for.
func (e *ExitRequest) ExitCode() int { return e.Code }

// requestExit asks Serve to shut down cleanly (requests in flight finish,
// the store is closed) and to return e. The first request wins.
func (a *Agent) requestExit(e *ExitRequest) {
	if !a.exitReq.CompareAndSwap(nil, e) {
		return
	}
	a.log.Warn("rackd is stopping on request", "exit_code", e.Code, "reason", e.Reason)
	if stop := a.stopServe.Load(); stop != nil {
		(*stop)(e)
	}
}

// uploadTimeout bounds the upload of one bundle (a slot image).
const uploadTimeout = 30 * time.Minute

// applianceDescriptor reads the descriptor the appliance's init wrote; it
// answers the request itself when there is none.
func (a *Agent) applianceDescriptor(w http.ResponseWriter) (appliance.Descriptor, bool) {
	path := a.cfg.Appliance.Descriptor
	if path == "" {
		writeError(w, http.StatusNotFound, api.CodeNotAnAppliance,
			"this rackd is not running as an appliance ([appliance] descriptor is not set): updates and factory resets are the appliance image's")
		return appliance.Descriptor{}, false
	}
	d, err := appliance.LoadDescriptor(path)
	if err != nil {
		a.log.Error("appliance descriptor", "path", path, "err", err)
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			fmt.Sprintf("cannot read the appliance descriptor: %v (the appliance's init writes it at boot)", err))
		return appliance.Descriptor{}, false
	}
	return d, true
}

// boolQuery reads a 0/1 query parameter.
func boolQuery(r *http.Request, name string, def bool) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query %s=%q: want 0 or 1", name, v)
	}
	return b, nil
}

// applianceUpdate takes a signed bundle (the body, or fetched from a URL),
// writes it to the inactive slot and arms a trial boot of it; then, unless
// reboot=0, rackd stops so that the appliance reboots into it.
func (a *Agent) applianceUpdate(w http.ResponseWriter, r *http.Request, who store.Actor) {
	desc, ok := a.applianceDescriptor(w)
	if !ok {
		return
	}
	allowDowngrade, err := boolQuery(r, "allow_downgrade", false)
	if err == nil {
		var reboot bool
		reboot, err = boolQuery(r, "reboot", true)
		if err == nil {
			a.takeUpdate(w, r, who, desc, allowDowngrade, reboot)
			return
		}
	}
	writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
}

func (a *Agent) takeUpdate(w http.ResponseWriter, r *http.Request, who store.Actor, desc appliance.Descriptor, allowDowngrade, reboot bool) {
	if e := a.exitReq.Load(); e != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, "rackd is stopping ("+e.Reason+"): retry once the appliance is back")
		return
	}
	if !a.applianceMu.TryLock() {
		writeError(w, http.StatusConflict, api.CodeConflict, "another appliance update or reset is running: wait for it to finish (rackd appliance status)")
		return
	}
	defer a.applianceMu.Unlock()
	// An upload lasts as long as a slot image takes over the link: it is
	// held to the right that started it, as a stream is (rights.go).
	held, release := a.rights.hold(r.Context(), store.UserRight(who))
	defer release()
	r = r.WithContext(held)
	target := desc.Inactive()
	slotSize, err := appliance.SlotSize(desc.Slots[target])
	if err != nil {
		a.internalError(w, r, fmt.Errorf("slot %s: %w", target, err))
		return
	}
	// The biggest bundle that can fit: a slot's worth of payload and the
	// largest header.
	limit := slotSize + int64(appliance.HeaderMax)
	var body io.Reader
	var size int64 // the bundle's length, when known
	source := "upload"
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/octet-stream", "":
		if r.ContentLength > limit {
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge,
				fmt.Sprintf("the bundle is %d bytes, more than slot %s holds (%d bytes with the bundle header): it is not an update for this appliance", r.ContentLength, target, limit))
			return
		}
		// api.read_timeout bounds reading a whole request, which a slot
		// image over a slow link overruns: this request gets longer.
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(uploadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			a.log.Warn("appliance update: cannot extend the read deadline", "err", err)
		}
		body, size = http.MaxBytesReader(w, r.Body, limit), max(r.ContentLength, 0)
	case "application/json":
		var req api.ApplianceUpdateRequest
		if a.decodeBody(w, r, &req, false) != nil {
			return
		}
		resp, n, err := a.fetchBundle(r.Context(), req.URL, limit)
		if err != nil {
			var he httpError
			if errors.As(err, &he) {
				writeError(w, he.status, he.code, he.Error())
				return
			}
			writeError(w, http.StatusBadGateway, api.CodeFetchFailed, err.Error())
			return
		}
		defer resp.Close()
		body, size, source = resp, n, req.URL
	default:
		writeError(w, http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia,
			fmt.Sprintf("content type %q is not accepted: send the bundle as application/octet-stream, or application/json {\"url\": ...}", mt))
		return
	}
	a.log.Info("appliance update", "by", who.Name, "source", source, "slot", target, "allow_downgrade", allowDowngrade)
	st, err := appliance.Update(r.Context(), body, desc, appliance.UpdateOptions{
		AllowDowngrade: allowDowngrade, BundleSize: size, Log: a.log.With("service", "appliance")})
	if why := context.Cause(held); err != nil && store.RightLost(why) {
		a.storeError(w, r, fmt.Errorf("the update was stopped: %w", why))
		return
	}
	if err != nil {
		a.updateError(w, r, err)
		return
	}
	view, err := a.applianceView(desc, st)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	u := st.LastUpdate
	reason := fmt.Sprintf("update to %s (build %d) armed in slot %s", u.Version, u.Build, u.Slot)
	a.answerAndMaybeExit(w, view, reboot, reason)
}

// answerAndMaybeExit sends the status and, when reboot, has rackd stop
// with appliance.ExitReboot once the answer is on its way: Serve's
// shutdown lets this request finish before it closes anything.
func (a *Agent) answerAndMaybeExit(w http.ResponseWriter, view api.ApplianceStatus, reboot bool, reason string) {
	view.Rebooting = reboot
	if reboot {
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, http.StatusOK, view)
	http.NewResponseController(w).Flush()
	if reboot {
		a.requestExit(&ExitRequest{Code: appliance.ExitReboot, Reason: reason + ": rebooting"})
	} else {
		a.log.Info(reason + "; not rebooting (reboot=0): the next boot tries it")
	}
}

// updateError answers a refused or failed update with what the operator
// can do about it.
func (a *Agent) updateError(w http.ResponseWriter, r *http.Request, err error) {
	var maxErr *http.MaxBytesError
	type answer struct {
		status int
		code   string
	}
	for _, c := range []struct {
		err error
		answer
	}{
		{appliance.ErrBadSignature, answer{http.StatusForbidden, api.CodeBundleSignature}},
		{appliance.ErrWrongArch, answer{http.StatusUnprocessableEntity, api.CodeBundleRefused}},
		{appliance.ErrDowngrade, answer{http.StatusConflict, api.CodeDowngrade}},
		{appliance.ErrOnTrial, answer{http.StatusConflict, api.CodeConflict}},
		{appliance.ErrTooLarge, answer{http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge}},
		{appliance.ErrNotBundle, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
		{appliance.ErrManifestSize, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
		{appliance.ErrBadManifest, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
		{appliance.ErrTruncated, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
		{appliance.ErrPayloadDigest, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
		{appliance.ErrTrailingData, answer{http.StatusBadRequest, api.CodeBundleInvalid}},
	} {
		if errors.Is(err, c.err) {
			msg := err.Error()
			if c.err == appliance.ErrDowngrade {
				msg += " (rackd appliance update --allow-downgrade, or allow_downgrade=1)"
			}
			writeError(w, c.status, c.code, msg)
			return
		}
	}
	if errors.As(err, &maxErr) {
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge,
			fmt.Sprintf("the bundle is larger than %d bytes, more than the inactive slot holds: it is not an update for this appliance (the slot was wiped)", maxErr.Limit))
		return
	}
	if r.Context().Err() != nil {
		a.log.Warn("appliance update cancelled: the client went away", "err", err)
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "update cancelled: "+err.Error())
		return
	}
	a.internalError(w, r, err)
}

// httpError is a refusal with its status and code.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e httpError) Error() string { return e.msg }

// fetchBundle opens an http(s) URL for the update, bounded to limit bytes,
// with its length when the server tells it (0 otherwise).
func (a *Agent) fetchBundle(ctx context.Context, raw string, limit int64) (io.ReadCloser, int64, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, 0, httpError{http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("url %q: want an http or https URL of the bundle", raw)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, httpError{http.StatusBadRequest, api.CodeBadRequest, err.Error()}
	}
	// No timeout of its own: a slot image takes what it takes, and the
	// request's context ends it when the client goes away.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetch the bundle: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("fetch the bundle from %s: %s", u.Redacted(), resp.Status)
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, 0, httpError{http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge,
			fmt.Sprintf("the bundle at %s is %d bytes, more than the inactive slot holds (%d with the header)", u.Redacted(), resp.ContentLength, limit)}
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, limit+1), resp.Body}, max(resp.ContentLength, 0), nil
}

func (a *Agent) applianceStatus(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	desc, ok := a.applianceDescriptor(w)
	if !ok {
		return
	}
	st, err := appliance.LoadStatus(desc.StatusFile)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	view, err := a.applianceView(desc, st)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	view.Rebooting = a.exitReq.Load() != nil
	writeJSON(w, http.StatusOK, view)
}

// applianceView is the status file seen with the descriptor and the GRUB
// environment.
func (a *Agent) applianceView(desc appliance.Descriptor, st appliance.Status) (api.ApplianceStatus, error) {
	env, err := appliance.ReadEnvFile(desc.GrubEnv)
	if err != nil {
		return api.ApplianceStatus{}, fmt.Errorf("GRUB environment: %w", err)
	}
	next, trial, _ := appliance.SelectSlot(env)
	v := api.ApplianceStatus{Version: desc.Version, Build: desc.Build, Booted: string(desc.Booted), Trial: desc.Trial,
		GoodSlot: string(appliance.GoodSlot(env)), NextBoot: string(next), NextBootTrial: trial,
		ResetRequested: appliance.ResetRequested(env), Slots: map[string]api.ApplianceSlot{}}
	for _, s := range []appliance.Slot{appliance.SlotA, appliance.SlotB} {
		ss := st.Slot(s)
		if s == desc.Booted && ss.Version == "" && ss.State == appliance.StateUnknown {
			// The init had not recorded the boot: the descriptor knows.
			ss = appliance.SlotStatus{Version: desc.Version, Build: desc.Build, State: appliance.StateGood}
			if desc.Trial {
				ss.State = appliance.StateTrying
			}
		}
		v.Slots[string(s)] = api.ApplianceSlot{Version: ss.Version, Build: ss.Build, State: string(ss.State), Device: desc.Slots[s]}
	}
	if u := st.LastUpdate; u != nil {
		au := &api.ApplianceUpdate{Version: u.Version, Build: u.Build, Slot: string(u.Slot), Started: u.Started, Result: u.Result, Reason: u.Reason}
		if !u.Finished.IsZero() {
			f := u.Finished
			au.Finished = &f
		}
		v.LastUpdate = au
	}
	return v, nil
}

// applianceReset asks GRUB for a factory reset at the next boot (the init
// then erases the data partition; the slots stay) and reboots.
func (a *Agent) applianceReset(w http.ResponseWriter, r *http.Request, who store.Actor) {
	desc, ok := a.applianceDescriptor(w)
	if !ok {
		return
	}
	reboot, err := boolQuery(r, "reboot", true)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	var req api.ApplianceResetRequest
	if a.decodeBody(w, r, &req, true) != nil {
		return
	}
	if !req.Confirm {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			`a factory reset erases the data partition (machines, leases, users, tokens, images): send {"confirm": true} to mean it`)
		return
	}
	if !a.applianceMu.TryLock() {
		writeError(w, http.StatusConflict, api.CodeConflict, "an appliance update is running: wait for it to finish")
		return
	}
	defer a.applianceMu.Unlock()
	if err := appliance.Reset(desc); err != nil {
		a.internalError(w, r, fmt.Errorf("request a factory reset: %w", err))
		return
	}
	a.log.Warn("factory reset requested", "by", who.Name)
	st, err := appliance.LoadStatus(desc.StatusFile)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	view, err := a.applianceView(desc, st)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	a.answerAndMaybeExit(w, view, reboot, "factory reset requested")
}

// readiness is what /healthz reports: the store answers, and every
// configured DHCP interface is being served.
func (a *Agent) readiness() api.Health {
	h := api.Health{Status: "ok", Version: Version, Store: "ok", DHCPInterfaces: a.cfg.DHCP.Interfaces}
	// A read transaction proves the database answers.
	if _, err := a.store.HasUsers(); err != nil {
		h.Store = err.Error()
		h.NotReady = append(h.NotReady, "database unavailable: "+err.Error())
	}
	if len(a.cfg.DHCP.Interfaces) > 0 {
		var bound []string
		if a.dhcp != nil {
			bound = a.dhcp.Bound()
		}
		h.DHCPBound = bound
		for _, want := range a.cfg.DHCP.Interfaces {
			found := false
			for _, b := range bound {
				found = found || b == want
			}
			if !found {
				h.NotReady = append(h.NotReady, "DHCP interface "+want+" not bound")
			}
		}
	}
	if len(h.NotReady) > 0 {
		h.Status = "not ready: " + strings.Join(h.NotReady, "; ")
	}
	return h
}
