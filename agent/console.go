package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"rackd/api"
	"rackd/internal/consolelog"
	"rackd/power"
	"rackd/power/consolehub"
	"rackd/power/queue"
	"rackd/store"
)

// The serial console: rackd console (a user, live) and the console log
// (recorded while a phase runs). Both go through a.consoles, which holds at
// most one Serial-over-LAN session per BMC (docs/ARCHITECTURE.md section 6).

// ConsoleConfig is the [console] section: the console log's bounds.
type ConsoleConfig struct {
	Record    bool  `toml:"record"`
	Boots     int   `toml:"boots"`
	BootBytes int64 `toml:"boot_bytes"`
}

func (c ConsoleConfig) validate() error {
	var errs []error
	if c.Boots < 1 || c.Boots > 100 {
		errs = append(errs, fmt.Errorf("console.boots %d: want 1 to 100", c.Boots))
	}
	if c.BootBytes < 8<<10 || c.BootBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("console.boot_bytes %d: want 8 KiB to 64 MiB", c.BootBytes))
	}
	return errors.Join(errs...)
}

// ConsoleDir is, inside the state directory, where the console logs are.
const ConsoleDir = "console"

// consoleTailBytes is how much of the console log a failure event carries.
const consoleTailBytes = 4 << 10

// consoleGoodbye bounds the writing of the message that ends a console
// whose right is lost.
const consoleGoodbye = 2 * time.Second

// ConsoleUpgrade is the protocol the console route switches to: after the
// 101 answer the connection carries the console's bytes both ways, raw.
const ConsoleUpgrade = "rackd-console"

// newConsoles sets up the console hub, the console log and its recorder,
// and gives the store the console log's tail for failure events.
func (a *Agent) newConsoles() error {
	a.consoles = consolehub.New(a.log.With("service", "console"), consoleBusy)
	l, err := consolelog.Open(filepath.Join(a.cfg.StateDir, ConsoleDir),
		consolelog.Options{Boots: a.cfg.Console.Boots, BootBytes: a.cfg.Console.BootBytes})
	if err != nil {
		return err
	}
	a.consoleLog = l
	a.recorder = newRecorder(a, recorderOptions{})
	a.store.ConsoleTail(func(machine string) []byte {
		tail, err := l.Tail(machine, consoleTailBytes)
		if err != nil {
			a.log.Warn("console log: tail for the failure event", "machine", machine, "err", err)
		}
		return tail
	})
	return nil
}

// onStoreEvent is told about every committed event: the web UI's live
// updates, the console recorder, and the streams' rights (a machine's
// allocation changes with an event).
func (a *Agent) onStoreEvent(e store.Event) {
	a.rights.machineChanged(e.Machine)
	if e.Actor == store.PowerActor.Name && e.To != "" {
		a.powerTransition(e)
	}
	if a.ui != nil {
		a.ui.Hub().Event(e)
	}
	if a.recorder != nil {
		a.recorder.event(e)
	}
}

// consoleAccess finds the machine of a console request and checks that who
// may see its console (store.ConsoleRight: an admin, or the user it is
// allocated to). It answers and returns false otherwise.
func (a *Agent) consoleAccess(w http.ResponseWriter, r *http.Request, who store.Actor) (store.Right, store.Machine, bool) {
	right, m, err := a.store.ConsoleRight(who, r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return right, m, false
	}
	return right, m, true
}

// consoleTarget is how the console reaches m's BMC: its power parameters
// with the BMC password opened (the store returns machines without it). A
// password that cannot be decrypted is an error naming the machine.
func (a *Agent) consoleTarget(m store.Machine) (power.Target, error) {
	pm, err := a.store.MachineForPower(m.ID)
	if err != nil {
		return power.Target{}, err
	}
	return queue.Target(pm), nil
}

// consoleDriver is m's driver when it has a serial console, or answers 400.
func (a *Agent) consoleDriver(w http.ResponseWriter, m store.Machine) (power.Consoler, bool) {
	drv, ok := a.powerDrivers[m.Power.Driver].(power.Consoler)
	if !ok {
		driver := m.Power.Driver
		if driver == "" {
			driver = "none"
		}
		writeError(w, http.StatusBadRequest, api.CodeNoConsole,
			fmt.Sprintf("machine %s has power driver %s, which has no serial console (IPMI's Serial-over-LAN has one)", m.Hostname, driver))
		return nil, false
	}
	return drv, true
}

// machineConsole is GET /api/v1/machines/{id}/console: an HTTP/1.1
// upgrade to the machine's serial console (Connection: Upgrade, Upgrade:
// rackd-console; ?write=true to type). Refusals come before the upgrade as
// ordinary API errors: 409 console_busy names who holds the console.
func (a *Agent) machineConsole(w http.ResponseWriter, r *http.Request, who store.Actor) {
	right, m, ok := a.consoleAccess(w, r, who)
	if !ok {
		return
	}
	drv, ok := a.consoleDriver(w, m)
	if !ok {
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), ConsoleUpgrade) {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest,
			"the console is a connection upgrade: send Connection: Upgrade and Upgrade: "+ConsoleUpgrade+" (rackd console does)")
		return
	}
	write := false
	if s := r.URL.Query().Get("write"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("write %q: want true or false", s))
			return
		}
		write = b
	}
	target, err := a.consoleTarget(m)
	if err != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, err.Error())
		return
	}
	// The console lasts as long as the right that opened it: a revoked or
	// expired token, a removed user, the machine released or allocated to
	// someone else end it (rights.go).
	held, release := a.rights.hold(r.Context(), right)
	defer release()
	actx, cancel := context.WithTimeout(held, 2*time.Duration(a.cfg.Power.CommandTimeout))
	att, err := a.consoles.Attach(actx, drv, target, consolehub.AttachOptions{Who: who.Name, Machine: m.Hostname, Write: write})
	cancel()
	var busy *consolehub.BusyError
	switch {
	case errors.As(err, &busy):
		writeError(w, http.StatusConflict, api.CodeConsoleBusy, busy.Error())
		return
	case errors.Is(err, consolehub.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		return
	case err != nil && store.RightLost(context.Cause(held)):
		a.storeError(w, r, context.Cause(held))
		return
	case err != nil:
		a.log.Warn("console attach", "machine", m.ID, "hostname", m.Hostname, "err", err)
		writeError(w, http.StatusBadGateway, api.CodeBMCError, fmt.Sprintf("the console of %s: %v", m.Hostname, err))
		return
	}
	defer att.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.internalError(w, r, fmt.Errorf("console: hijack: %w", err))
		return
	}
	defer conn.Close()
	if rec, ok := w.(*statusRecorder); ok {
		rec.code = http.StatusSwitchingProtocols // for the metrics
	}
	conn.SetDeadline(time.Time{}) // the server's read timeout is for requests
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", ConsoleUpgrade)
	if err := brw.Flush(); err != nil {
		return
	}
	a.log.Info("console attached", "machine", m.ID, "hostname", m.Hostname, "by", who.Name, "write", write)

	// The right lost: nothing typed reaches the machine from that moment,
	// and a client that does not read is not waited for to be told why.
	lost := func() error {
		if why := context.Cause(held); store.RightLost(why) {
			return why
		}
		return nil
	}
	stop := context.AfterFunc(held, func() {
		if lost() != nil {
			att.Close()
			conn.SetWriteDeadline(time.Now().Add(consoleGoodbye))
		}
	})
	defer stop()
	ended := func(why string) {
		fmt.Fprintf(conn, "\r\n[rackd: the console ended: %s]\r\n", why)
		a.log.Info("console ended", "machine", m.ID, "hostname", m.Hostname, "by", who.Name, "why", why)
	}

	// The client's bytes: typed when writing, else read only to see the
	// detach (the connection's end).
	detached := make(chan struct{})
	go func() {
		defer close(detached)
		var sink io.Writer = io.Discard
		if write {
			sink = att
		}
		io.Copy(sink, brw.Reader) //nolint:errcheck // its end is the detach
	}()
	for {
		select {
		case b, ok := <-att.Output():
			if !ok {
				// The session ended under the user: say why, then hang up.
				why := "rackd is shutting down"
				if err := lost(); err != nil {
					why = err.Error()
				} else if err := att.Err(); err != nil {
					why = err.Error()
				}
				ended(why)
				return
			}
			if _, err := conn.Write(b); err != nil {
				return
			}
		case <-detached:
			if err := lost(); err != nil {
				ended(err.Error())
				return
			}
			a.log.Info("console detached", "machine", m.ID, "hostname", m.Hostname, "by", who.Name)
			return
		case <-held.Done():
			if err := lost(); err != nil {
				ended(err.Error())
			}
			return
		}
	}
}

// headerHas reports whether the comma-separated header name has token
// (case-insensitive), as Connection: keep-alive, Upgrade.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// machineConsoleLog is GET /api/v1/machines/{id}/console-log: the boots
// kept, oldest first.
func (a *Agent) machineConsoleLog(w http.ResponseWriter, r *http.Request, who store.Actor) {
	_, m, ok := a.consoleAccess(w, r, who)
	if !ok {
		return
	}
	bs, err := a.consoleLog.Boots(m.ID)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	out := make([]api.ConsoleBoot, len(bs))
	for i, b := range bs {
		out[i] = api.ConsoleBoot{Boot: b.N, Started: b.Started, Phase: b.Phase, Bytes: b.Bytes, Dropped: b.Dropped}
	}
	writeJSON(w, http.StatusOK, out)
}

// machineConsoleBoot is GET /api/v1/machines/{id}/console-log/{boot}: one
// boot's output as it was recorded (bytes, not necessarily text); "latest"
// is the newest.
func (a *Agent) machineConsoleBoot(w http.ResponseWriter, r *http.Request, who store.Actor) {
	_, m, ok := a.consoleAccess(w, r, who)
	if !ok {
		return
	}
	n := 0
	if s := r.PathValue("boot"); s != "latest" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("boot %q: want a boot number (1, 2, ...) or latest", s))
			return
		}
		n = v
	}
	b, data, err := a.consoleLog.Read(m.ID, n)
	if errors.Is(err, consolelog.ErrNoBoot) {
		writeError(w, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("machine %s has no console log of boot %s (rackd machines console-log %s --list shows the kept boots)", m.Hostname, r.PathValue("boot"), m.Hostname))
		return
	}
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Rackd-Boot", strconv.Itoa(b.N))
	w.Header().Set("X-Rackd-Boot-Dropped", strconv.FormatInt(b.Dropped, 10))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}
