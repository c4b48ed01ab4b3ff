package agent

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"rackd/api"
	"rackd/enlist"
	"rackd/netboot/bootconf"
	"rackd/store"
)

// The metadata endpoints (threat model: docs/ARCHITECTURE.md section 7): the enlistment
// environment asks whether its machine is known and what to do, and
// introduces it when it is not. They need no token, so they reveal nothing
// but a state and an action, never change a known machine, cap bodies and
// rate-limit each source address.

// metadataState is the agent's part of the metadata endpoints.
type metadataState struct {
	limiter *rateLimiter
}

func newMetadataState(cfg Config) *metadataState {
	return &metadataState{limiter: newRateLimiter(cfg.Enlist.RateLimit, cfg.Enlist.RateBurst)}
}

// newMetadataMetrics is rackd_metadata_requests_total, with the series a
// dashboard looks for created at zero.
func newMetadataMetrics() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "metadata", Name: "requests_total",
		Help: "Metadata requests of the boot environments, by endpoint (whoami, enlist, credential) and outcome: " +
			"the action answered (enlist, reboot, poweroff), created, already_known, granted (a credential), or the refusal " +
			"(bad_request, refused, conflict, rate_limited, error).",
	}, []string{"endpoint", "outcome"})
	for _, o := range []string{"enlist", "reboot", "poweroff", "bad_request", "rate_limited", "error"} {
		c.WithLabelValues("whoami", o)
	}
	for _, o := range []string{"created", "already_known", "bad_request", "conflict", "rate_limited", "error"} {
		c.WithLabelValues("enlist", o)
	}
	for _, o := range []string{"granted", "refused", "conflict", "bad_request", "rate_limited", "error"} {
		c.WithLabelValues("credential", o)
	}
	return c
}

// actionFor is the enlistment environment's rule: an unknown machine enlists; a known one
// reboots when its boot decision serves it a network environment (so that
// the next PXE round gets its real config instead of this one), and powers
// off otherwise. The decision is bootconf's own, so that whoami and the boot
// configs cannot disagree on which states boot from the network.
func actionFor(m store.MACOwner, known bool) enlist.WhoAmI {
	if !known {
		return enlist.WhoAmI{Action: enlist.ActionEnlist}
	}
	d := bootconf.Decide(bootconf.MachineInfo{ID: m.ID, State: string(m.State), Erase: m.Erase, DiskWritten: m.DiskWritten}, true, bootconf.Environments{})
	// Mode, not Boots(): a missing image makes the per-MAC config boot the
	// local disk with a message, which a reboot reaches; powering off would
	// strand a machine that rackd is waiting for. The mode depends on the
	// state alone, which is all the whoami lookup reads.
	w := enlist.WhoAmI{Known: true, State: string(m.State), Action: enlist.ActionPowerOff}
	if d.Mode != bootconf.ModeLocal {
		w.Action = enlist.ActionReboot
	}
	return w
}

// limitMetadata applies the per-source rate limit; on refusal it answers 429
// with Retry-After and returns false.
func (a *Agent) limitMetadata(w http.ResponseWriter, r *http.Request, endpoint string) bool {
	src, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return true // not a TCP peer (a test's recorder): nothing to key on
	}
	ok, wait := a.meta.limiter.allow(src.Addr().Unmap())
	if ok {
		return true
	}
	a.metrics.metadata.WithLabelValues(endpoint, "rate_limited").Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	writeError(w, http.StatusTooManyRequests, api.CodeRateLimited,
		fmt.Sprintf("too many metadata requests from %s: retry after %s", src.Addr().Unmap(), wait.Round(1e6)))
	return false
}

func (a *Agent) whoami(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if !a.limitMetadata(w, r, "whoami") {
		return
	}
	macs, msg := parseMACs(r.URL.Query()["mac"])
	if msg != "" {
		a.metrics.metadata.WithLabelValues("whoami", "bad_request").Inc()
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, msg)
		return
	}
	m, known, err := a.store.MachineOfMACs(macs)
	if err != nil {
		a.metrics.metadata.WithLabelValues("whoami", "error").Inc()
		a.internalError(w, r, err)
		return
	}
	ans := actionFor(m, known)
	a.metrics.metadata.WithLabelValues("whoami", string(ans.Action)).Inc()
	// Every machine of a rack that boots the enlistment environment asks:
	// the few possible answers are encoded once.
	body := whoamiBodies[ans]
	if body == nil {
		body = encodeWhoAmI(ans)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// whoamiBodies are the encoded answers of whoami, by answer.
var whoamiBodies = func() map[enlist.WhoAmI][]byte {
	out := map[enlist.WhoAmI][]byte{}
	for _, st := range store.States {
		ans := actionFor(store.MACOwner{State: st}, true)
		out[ans] = encodeWhoAmI(ans)
	}
	ans := actionFor(store.MACOwner{}, false)
	out[ans] = encodeWhoAmI(ans)
	return out
}()

func encodeWhoAmI(ans enlist.WhoAmI) []byte {
	b, _ := json.Marshal(ans) // three plain fields: cannot fail
	return append(b, '\n')
}

// parseMACs canonicalises whoami's mac parameters; msg says what is wrong.
func parseMACs(q []string) (macs []string, msg string) {
	if len(q) == 0 {
		return nil, "give the machine's MAC addresses: ?mac=52:54:00:12:34:56&mac=..."
	}
	if len(q) > enlist.MaxMACs {
		return nil, fmt.Sprintf("%d mac parameters, at most %d", len(q), enlist.MaxMACs)
	}
	macs = make([]string, len(q))
	for i, s := range q {
		n, err := store.NormalizeMAC(s)
		if err != nil {
			return nil, err.Error()
		}
		macs[i] = n
	}
	return macs, ""
}

func (a *Agent) enlistMachine(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if !a.limitMetadata(w, r, "enlist") {
		return
	}
	outcome := "error"
	defer func() { a.metrics.metadata.WithLabelValues("enlist", outcome).Inc() }()
	var inv enlist.Inventory
	// The inventory's own, smaller cap; decodeBody reports it as 413.
	r.Body = http.MaxBytesReader(w, r.Body, a.cfg.Enlist.MaxBodyBytes)
	if a.decodeBody(w, r, &inv, false) != nil {
		outcome = "bad_request"
		return
	}
	if err := inv.Validate(); err != nil {
		outcome = "bad_request"
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, "invalid inventory: "+err.Error())
		return
	}
	req := store.EnlistRequest{Hostname: inv.Hostname, Arch: inv.Arch, MACs: inv.MACs,
		CPUCount: inv.CPUCount, MemoryMB: inv.MemoryMB, SystemUUID: inv.DMI.UUID,
		Commission: a.cfg.Enlist.AutoCommission,
		Inventory: store.Inventory{Vendor: inv.DMI.Vendor, Product: inv.DMI.Product, Serial: inv.DMI.Serial,
			BMCAddress: inv.BMCAddress}}
	for _, d := range inv.Disks {
		req.Inventory.Disks = append(req.Inventory.Disks, store.Disk(d))
	}
	res, err := a.store.Enlist(r.Context(), req)
	if err != nil {
		if c := store.CodeOf(err); c == store.CodeInvalid {
			outcome = "bad_request"
		} else if c == store.CodeConflict {
			outcome = "conflict"
		}
		a.storeError(w, r, err)
		return
	}
	m := res.Machine
	ans := actionFor(store.MACOwner{ID: m.ID, State: m.State, Erase: m.Erase, DiskWritten: !m.DiskWritten.IsZero()}, true)
	if !res.Created {
		outcome = "already_known"
		a.log.Info("enlistment of a known machine", "machine", m.ID, "hostname", m.Hostname, "by", res.By,
			"state", m.State, "action", ans.Action, "source", r.RemoteAddr)
		// The machine's id and name stay out of the answer: the caller has
		// proved nothing but knowing a MAC.
		writeJSON(w, http.StatusConflict, enlist.Refusal{Code: enlist.CodeAlreadyKnown, Action: ans.Action,
			Error: fmt.Sprintf("rackd already knows this machine (by %s); it is %s", res.By, m.State)})
		return
	}
	outcome = "created"
	a.metrics.transitions.WithLabelValues("enlist").Inc()
	if m.State == store.StateCommissioning {
		a.metrics.transitions.WithLabelValues(string(store.ActionCommission)).Inc()
	}
	a.log.Info("machine enlisted", "machine", m.ID, "hostname", m.Hostname, "state", m.State, "macs", m.MACs,
		"cpu_count", m.CPUCount, "memory_mb", m.MemoryMB, "system_uuid", m.SystemUUID, "source", r.RemoteAddr)
	writeJSON(w, http.StatusCreated, enlist.Enlisted{ID: m.ID, Action: ans.Action})
}

// inventoryView is what a machine reported at enlistment, as the API shows
// it (nil for machines added by hand).
func inventoryView(m store.Machine) *api.Inventory {
	if m.Inventory == nil && m.SystemUUID == "" {
		return nil
	}
	v := &api.Inventory{SystemUUID: m.SystemUUID, Disks: []api.Disk{}}
	if inv := m.Inventory; inv != nil {
		v.Vendor, v.Product, v.Serial, v.BMCAddress = inv.Vendor, inv.Product, inv.Serial, inv.BMCAddress
		for _, d := range inv.Disks {
			v.Disks = append(v.Disks, api.Disk(d))
		}
	}
	return v
}
