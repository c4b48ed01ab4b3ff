package webui_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"rackd/api"
	"rackd/internal/ipmisim"
	"rackd/internal/redfishsim"
)

// TestBrowserPowerSettings drives the machine page's power settings in
// chromium against a real BMC (ipmi_sim): a machine without power points
// its Commission at the form; a wrong password is saved, tried, and its
// failure shown on the page without a reload; the right one clears it; the
// password is never shown back; a Redfish BMC's (redfishsim) certificate
// is pinned on the first query and its fingerprint shown; a payload in the power address stays text.
func TestBrowserPowerSettings(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the test peers (ipmi_sim from scripts/test-deps.sh); run as root or via make test")
	}
	chrome := newChrome(t)
	sim := ipmisim.Start(t, ipmisim.Options{})
	rg := start(t)
	m := rg.addMachine(t, api.CreateMachine{Hostname: "bare-01", Arch: "amd64", MACs: []string{"52:54:00:20:00:01"}})
	page := "/machines/" + m.ID
	admin := rg.tab(t, chrome)
	admin.login(t, rg.admin)
	const wrong = "not-the-Password-9"

	// fill sets the power settings form's fields by id (text, select and
	// checkbox alike) as a user would leave them.
	fill := func(t *testing.T, fields map[string]string) {
		t.Helper()
		for id, v := range fields {
			js := `(function(){var e=document.getElementById(` + jsString(id) + `);if(!e)return false;` +
				`if(e.type==="checkbox"){e.checked=` + jsString(v) + `==="on"}else{e.value=` + jsString(v) + `}` +
				`e.dispatchEvent(new Event("change",{bubbles:true}));return true})()`
			if !eval[bool](t, admin, js) {
				t.Fatalf("no field #%s on the page", id)
			}
		}
	}
	save := func(t *testing.T) {
		t.Helper()
		// The page's flashes go first: the ones waited for are the
		// answer's.
		eval[bool](t, admin, `(function(){document.querySelectorAll("main > div.notice, main > div.error").forEach(function(e){e.remove()});return true})()`)
		admin.do(t, "save the power settings",
			chromedp.Click(chromedp.CSS(`form[action$="/power-settings"] button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`main > div[role="status"].notice, main > div[role="alert"].error`)),
			chromedp.WaitReady(chromedp.CSS(`body[data-live="on"]`)))
	}
	machine := func(t *testing.T) api.Machine {
		t.Helper()
		var got api.Machine
		if st := rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got); st != http.StatusOK {
			t.Fatalf("get machine: %d", st)
		}
		return got
	}
	noPassword := func(t *testing.T, secret string) {
		t.Helper()
		html := eval[string](t, admin, `document.documentElement.outerHTML`)
		if strings.Contains(html, secret) {
			t.Errorf("the page shows the BMC password")
		}
		if v := eval[string](t, admin, `document.getElementById("ps-password").value`); v != "" {
			t.Errorf("the password field holds %q", v)
		}
	}

	t.Run("commission without power points at the form", func(t *testing.T) {
		admin.openLive(t, page)
		if !eval[bool](t, admin, `document.getElementById("power-settings").open`) {
			t.Error("the power settings are folded on a machine without a driver")
		}
		if hint := admin.text(t, "#needs-power"); !strings.Contains(hint, "power settings") {
			t.Errorf("the hint by Commission says %q", hint)
		}
		admin.do(t, "commission",
			chromedp.Click(chromedp.CSS(`form:has(input[name="action"][value="commission"]) button`)),
			chromedp.WaitVisible(chromedp.CSS(`main > div[role="alert"].error`)))
		msg := admin.text(t, `main > div[role="alert"].error`)
		if !strings.Contains(msg, "power settings below") || strings.Contains(msg, "rackd machines set") {
			t.Errorf("the refusal says %q, want it to point at the form, not the CLI", msg)
		}
		if loc := value(t, admin, "location", chromedp.Location()); !strings.HasSuffix(loc, "#power-settings") {
			t.Errorf("the page is at %s, not the form", loc)
		}
		if st := machine(t).State; st != "NEW" {
			t.Errorf("the machine is %s", st)
		}
		admin.clean(t, page)
	})

	t.Run("a wrong BMC password fails clearly on the page", func(t *testing.T) {
		admin.openLive(t, page)
		fill(t, map[string]string{"ps-driver": "ipmi", "ps-address": sim.Addr, "ps-user": sim.User, "ps-password": wrong, "ps-query": "on"})
		if hidden := eval[bool](t, admin, `document.querySelector('fieldset[data-driver="redfish"]').hidden`); !hidden {
			t.Error("the Redfish fields show for ipmi")
		}
		save(t)
		if notice := admin.text(t, `main > div[role="status"].notice`); !strings.Contains(notice, "power settings saved") || !strings.Contains(notice, "Querying the BMC") {
			t.Errorf("notice %q", notice)
		}
		admin.do(t, "the query's failure shows", chromedp.WaitVisible(chromedp.CSS(`#power-failure[role="alert"]`)))
		if msg := admin.text(t, "#power-failure"); !strings.Contains(msg, "query") || !strings.Contains(msg, "authentication failed") {
			t.Errorf("the failure says %q", msg)
		}
		if got := machine(t); got.Power.Driver != "ipmi" || got.Power.Address != sim.Addr {
			t.Errorf("power after the save: %+v", got.Power)
		}
		noPassword(t, wrong)
		// After a reload too, from the server.
		admin.openLive(t, page)
		if msg := admin.text(t, `#power-failure[role="alert"]`); !strings.Contains(msg, "authentication failed") {
			t.Errorf("after a reload the failure says %q", msg)
		}
		noPassword(t, wrong)
		admin.clean(t, page)
	})

	t.Run("the right password clears the failure", func(t *testing.T) {
		admin.openLive(t, page)
		if open := eval[bool](t, admin, `document.getElementById("power-settings").open`); open {
			t.Error("the settings are unfolded on a machine with a driver")
		}
		admin.do(t, "unfold", chromedp.Click(chromedp.CSS(`#power-settings summary`)))
		if v := eval[string](t, admin, `document.getElementById("ps-address").value`); v != sim.Addr {
			t.Errorf("the address field holds %q, want %q", v, sim.Addr)
		}
		// Only the password: the address and the username stay.
		fill(t, map[string]string{"ps-password": sim.Password, "ps-reason": "right password"})
		save(t)
		admin.do(t, "the query ends done", chromedp.WaitReady(chromedp.CSS(`#power-requests tbody tr[data-state="done"]`)))
		admin.waitJS(t, "the failure is gone", `document.getElementById("power-failure").hidden`)
		noPassword(t, sim.Password)
		// What the query saw (the live update says only how it ended).
		admin.openLive(t, page)
		if obs := admin.text(t, "#power-observed"); !strings.HasPrefix(obs, "off") {
			t.Errorf("observed power %q, want off (the BMC's)", obs)
		}
		if !eval[bool](t, admin, `document.getElementById("power-failure").hidden`) {
			t.Error("after a reload the failure still shows")
		}
		if got := machine(t); got.Power.Address != sim.Addr {
			t.Errorf("the address changed: %+v", got.Power)
		}
		admin.clean(t, page)
	})

	t.Run("a Redfish BMC's certificate is pinned on first use and shown", func(t *testing.T) {
		bmc := redfishsim.Start(t, redfishsim.Options{})
		admin.openLive(t, page)
		admin.do(t, "unfold", chromedp.Click(chromedp.CSS(`#power-settings summary`)))
		fill(t, map[string]string{"ps-driver": "redfish", "ps-address": bmc.URL, "ps-user": bmc.User, "ps-password": bmc.Password, "ps-query": "on"})
		if hidden := eval[bool](t, admin, `document.querySelector('fieldset[data-driver="redfish"]').hidden`); hidden {
			t.Error("the Redfish fields are hidden for redfish")
		}
		if hidden := eval[bool](t, admin, `document.querySelector('fieldset[data-driver="ipmi"]').hidden`); !hidden {
			t.Error("the IPMI fields show for redfish")
		}
		save(t)
		admin.do(t, "the query ends", chromedp.WaitReady(chromedp.CSS(`#power-requests tbody tr[data-state="done"]`)))
		var colons []string
		for i := 0; i+1 < len(bmc.Fingerprint()); i += 2 {
			colons = append(colons, strings.ToUpper(bmc.Fingerprint()[i:i+2]))
		}
		want := strings.Join(colons, ":")
		admin.openLive(t, page)
		if got := admin.text(t, "#power-certificate"); !strings.Contains(got, want) {
			t.Errorf("the certificate reads %q, want the BMC's %s", got, want)
		}
		if got := machine(t); got.Power.Driver != "redfish" || got.Power.TLSFingerprint != bmc.Fingerprint() {
			t.Errorf("power %+v, want the BMC's fingerprint %s", got.Power, bmc.Fingerprint())
		}
		noPassword(t, bmc.Password)
		admin.clean(t, page)
	})

	const payload = `"><img/src=x/onerror=alert(1)><script>alert(2)</script>`
	const injected = `document.querySelectorAll('main img, main script').length`
	t.Run("a payload in the power address stays text", func(t *testing.T) {
		// ipmi refuses it, in words that quote it.
		admin.openLive(t, page)
		admin.do(t, "unfold", chromedp.Click(chromedp.CSS(`#power-settings summary`)))
		fill(t, map[string]string{"ps-driver": "ipmi", "ps-address": payload, "ps-query": "off"})
		save(t)
		if msg := admin.text(t, `main > div[role="alert"].error`); !strings.Contains(msg, "<img/src=x") {
			t.Errorf("the refusal %q does not quote the address as text", msg)
		}
		if n := eval[int](t, admin, injected); n != 0 {
			t.Errorf("the refusal made %d elements", n)
		}
		// manual takes any short text without spaces: kept, and shown.
		admin.do(t, "unfold", chromedp.Click(chromedp.CSS(`#power-settings summary`)))
		fill(t, map[string]string{"ps-driver": "manual", "ps-address": payload, "ps-query": "off"})
		save(t)
		if got := machine(t); got.Power.Driver != "manual" || got.Power.Address != payload {
			t.Fatalf("power %+v", got.Power)
		}
		for _, path := range []string{page, "/machines"} {
			admin.openLive(t, path)
			if n := eval[int](t, admin, injected); n != 0 {
				t.Errorf("%s: the payload made %d elements", path, n)
			}
			admin.clean(t, path)
		}
		admin.openLive(t, page)
		if got := admin.text(t, "#power-driver code"); got != payload {
			t.Errorf("the address shows as %q", got)
		}
		if v := eval[string](t, admin, `document.getElementById("ps-address").value`); v != payload {
			t.Errorf("the address field holds %q", v)
		}
		admin.clean(t, page)
	})
}
