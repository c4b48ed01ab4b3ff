package webui_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"rackd/api"
	"rackd/store/storetest"
)

// TestBrowserDeployAbortRelease drives a machine's daily work in chromium:
// allocate, deploy with an image chosen from those imported for its arch,
// uploaded user-data and an extra SSH key, abort the deployment (a
// confirmation first), release with erase, abort the release; and checks
// that an unknown CPU count and memory read "-" and that the image is gone
// from the page once the machine is released.
func TestBrowserDeployAbortRelease(t *testing.T) {
	chrome := newChrome(t)
	rg := start(t)
	storetest.DeployImages(t, rg.Store(), "amd64", "debian-12", "noble")
	storetest.DeployImages(t, rg.Store(), "arm64", "bookworm-arm")
	m := rg.addMachine(t, api.CreateMachine{Hostname: "dep-01", Arch: "amd64", MACs: []string{"52:54:00:30:00:01"},
		State: "READY", Power: &api.PowerParams{Driver: "fake", Address: "bmc-dep"}})
	page := "/machines/" + m.ID
	admin := rg.tab(t, chrome)
	admin.login(t, rg.admin)
	machine := func(t *testing.T) api.Machine {
		t.Helper()
		var got api.Machine
		if st := rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID, nil, &got); st != http.StatusOK {
			t.Fatalf("get machine: %d", st)
		}
		return got
	}
	// act clicks the button of the action form and waits for the
	// answer's flash (the page's own go first).
	act := func(t *testing.T, action string) {
		t.Helper()
		eval[bool](t, admin, `(function(){document.querySelectorAll("main > div.notice, main > div.error").forEach(function(e){e.remove()});return true})()`)
		admin.do(t, action,
			chromedp.Click(chromedp.CSS(`.actions form:has(input[name="action"][value="`+action+`"]) button`)),
			chromedp.WaitVisible(chromedp.CSS(`main > div[role="status"].notice, main > div[role="alert"].error`)))
		if msg := eval[string](t, admin, `(document.querySelector("main > div.error")||{}).textContent||""`); msg != "" {
			t.Fatalf("%s: refused: %s", action, msg)
		}
	}
	confirmed := func(t *testing.T, want string) {
		t.Helper()
		select {
		case <-admin.dialog:
		case <-time.After(waitFor):
			t.Fatal("no confirmation dialog")
		}
		if d := admin.takeDialogs(); len(d) != 1 || !strings.Contains(d[0], want) {
			t.Errorf("dialogs %q, want one saying %q", d, want)
		}
	}
	factOf := func(t *testing.T, name string) string {
		t.Helper()
		return eval[string](t, admin, `(function(){var d=Array.from(document.querySelectorAll("#h-identity ~ dl dt")).find(function(e){return e.textContent===`+jsString(name)+`});return d?d.nextElementSibling.textContent:"(none)"})()`)
	}

	t.Run("unknown CPUs and memory read -", func(t *testing.T) {
		admin.open(t, page)
		if cpu, mem := factOf(t, "CPUs"), factOf(t, "Memory"); cpu != "-" || mem != "-" {
			t.Errorf("CPUs %q, memory %q; want - for both", cpu, mem)
		}
		admin.open(t, "/machines")
		if row := admin.text(t, "#machine-"+m.ID); strings.Contains(row, "0 B") {
			t.Errorf("the list's row says %q", row)
		}
		admin.clean(t, "/machines")
	})

	userData := []byte("#cloud-config\npackages: [htop]\n")
	key := storetest.SSHKey(t, "ed25519", 0, "ops@bastion")
	t.Run("deploy with an image of its arch, user-data and a key", func(t *testing.T) {
		admin.openLive(t, page)
		admin.do(t, "allocate", chromedp.Click(chromedp.CSS(`form[action$="/allocate"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`main > div[role="status"].notice`)))
		opts := eval[[]string](t, admin, `Array.from(document.querySelectorAll("#act-deploy-image option")).map(function(o){return o.value})`)
		if strings.Join(opts, ",") != ",debian-12,noble" {
			t.Errorf("the image choice is %q, want the default and amd64's debian-12 and noble", opts)
		}
		file := filepath.Join(t.TempDir(), "user-data.yaml")
		if err := os.WriteFile(file, userData, 0o644); err != nil {
			t.Fatal(err)
		}
		admin.do(t, "fill the deploy form",
			chromedp.SetValue(chromedp.ID("act-deploy-image"), "noble"),
			chromedp.SetUploadFiles(chromedp.ID("act-deploy-ud"), []string{file}),
			chromedp.SendKeys(chromedp.ID("act-deploy-keys"), key))
		act(t, "deploy")
		got := machine(t)
		if got.State != "DEPLOYING" || got.Deployment == nil || got.Deployment.Image != "noble" ||
			got.Deployment.UserDataBytes != len(userData) || got.Deployment.SSHKeys != 1 {
			t.Fatalf("after the deploy: %s %+v", got.State, got.Deployment)
		}
		var ud api.UserData
		if st := rg.api(t, rg.admin, "GET", "/api/v1/machines/"+m.ID+"/user-data", nil, &ud); st != http.StatusOK {
			t.Fatalf("user-data: %d", st)
		}
		if raw, _ := base64.StdEncoding.DecodeString(ud.UserData); !bytes.Equal(raw, userData) {
			t.Errorf("the deployment's user-data is %q", raw)
		}
		if img := factOf(t, "Image"); img != "noble" {
			t.Errorf("the page's image is %q", img)
		}
		admin.clean(t, page)
	})

	t.Run("abort the deployment", func(t *testing.T) {
		admin.openLive(t, page)
		act(t, "abort")
		confirmed(t, "dep-01 is DEPLOYING")
		if got := machine(t); got.State != "ALLOCATED" || got.Owner != "admin" {
			t.Errorf("after the abort: %s owned by %q", got.State, got.Owner)
		}
		if n := eval[int](t, admin, `document.querySelectorAll('form:has(input[name="action"][value="abort"])').length`); n != 0 {
			t.Errorf("an ALLOCATED machine is offered %d abort forms", n)
		}
		admin.clean(t, page)
	})

	t.Run("release with erase, then abort it", func(t *testing.T) {
		admin.openLive(t, page)
		admin.do(t, "tick erase", chromedp.Click(chromedp.ID("act-release-erase")))
		act(t, "release")
		if got := machine(t); got.State != "RELEASING" {
			t.Fatalf("after the release: %s", got.State)
		}
		admin.open(t, page)
		if hist := admin.text(t, "#power-requests tbody"); !strings.Contains(hist, "erase before release") {
			t.Errorf("no power request for the erase: %q", hist)
		}
		if img := factOf(t, "Image"); img != "(none)" {
			t.Errorf("a released machine's page shows the image %q", img)
		}
		act(t, "abort")
		confirmed(t, "dep-01 is RELEASING")
		if got := machine(t); got.State != "BROKEN" {
			t.Errorf("an aborted release: %s, want BROKEN", got.State)
		}
		admin.clean(t, page)
	})
}
