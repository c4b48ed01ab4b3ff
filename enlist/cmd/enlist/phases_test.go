package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"rackd/agent"
	"rackd/agent/client"
	"rackd/api"
	"rackd/enlist"
	"rackd/enlist/bmc"
	"rackd/enlist/deploy"
	"rackd/internal/chunksum"
	"rackd/store"
)

// These tests run the commission, deploy and erase modes of the program
// against a real rackd (the agent on a loopback port, images imported
// through its API), with the kernel command line taken from the boot
// config rackd renders for the machine, and a file as the machine's disk.
// The program plays the machine from loopback, where it holds no DHCP
// lease, so rackd runs with metadata.credential_binding = "none" (any
// source claims, once); the binding rule is tested by the agent's tests and
// against real DHCP clients in network namespaces (agent/cmd/rackd).

const (
	phaseMAC  = "52:54:00:00:10:02" // the harness's boot interface (eth1)
	diskBytes = 20971520 * 512      // machineFS's vda
)

type phaseLab struct {
	t      *testing.T
	a      *agent.Agent
	url    string
	api    *client.Client
	disk   string // the file that is the machine's vda
	rawSHA string
	raw    []byte
	// bmcSetup, when set, is the machine's in-band BMC set-up.
	bmcSetup func() (bmc.Result, error)
}

// newPhaseLab starts rackd, imports a commissioning environment (a fake
// kernel and initrd: nothing boots them here) and a raw disk image "raw",
// and adds the machine, NEW.
func newPhaseLab(t *testing.T, tweak ...func(*agent.Config)) *phaseLab {
	ln, url := listen(t)
	var tw func(*agent.Config)
	if len(tweak) > 0 {
		tw = tweak[0]
	}
	a, serve := startRackd(t, ln, func(c *agent.Config) {
		c.Metadata.CredentialBinding = agent.BindingNone
		if tw != nil {
			tw(c)
		}
	})
	serve()
	tok, err := os.ReadFile(a.AdminTokenPath())
	if err != nil {
		t.Fatal(err)
	}
	l := &phaseLab{t: t, a: a, url: url, api: client.New(url, strings.TrimSpace(string(tok)))}
	l.importImage("commission", "commission", map[string][]byte{"vmlinuz": []byte("kernel"), "initrd": []byte("initrd")},
		`"cmdline": "console=ttyS0",`)
	l.raw = make([]byte, 5<<20+4321)
	r := rand.New(rand.NewPCG(7, 7))
	for i := range l.raw {
		l.raw[i] = byte(r.Uint32())
	}
	// "Bootable", with an empty partition table (where a deployment's
	// seed gets a partition).
	clear(l.raw[446:510])
	l.raw[510], l.raw[511] = 0x55, 0xAA
	sum := sha256.Sum256(l.raw)
	l.rawSHA = hex.EncodeToString(sum[:])
	l.importImage("raw", "deploy", map[string][]byte{"disk.img": l.raw}, "")
	if len(tweak) == 0 {
		if _, err := l.api.CreateMachine(t.Context(), api.CreateMachine{Hostname: "node1", MACs: []string{phaseMAC},
			// Powered by hand: the test plays the machine that boots.
			Power: &api.PowerParams{Driver: "manual"}}); err != nil {
			t.Fatal(err)
		}
	}
	l.disk = filepath.Join(t.TempDir(), "vda")
	f, err := os.Create(l.disk)
	if err != nil {
		t.Fatal(err)
	}
	// An old system on the disk: its first MiB is not zero.
	if _, err := f.Write(bytes.Repeat([]byte{0xEE}, 2<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(diskBytes); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return l
}

func (l *phaseLab) importImage(name, purpose string, files map[string][]byte, extra string) {
	dir := l.t.TempDir()
	var list []string
	for path, data := range files {
		if err := os.WriteFile(filepath.Join(dir, path), data, 0o644); err != nil {
			l.t.Fatal(err)
		}
		role := map[string]string{"vmlinuz": "kernel", "initrd": "initrd", "disk.img": "disk"}[path]
		sum := sha256.Sum256(data)
		list = append(list, fmt.Sprintf(`{"path": %q, "role": %q, "sha256": %q, "size": %d}`, path, role, hex.EncodeToString(sum[:]), len(data)))
	}
	manifest := fmt.Sprintf(`{"name": %q, "arch": "amd64", "purpose": %q, %s "files": [%s]}`, name, purpose, extra, strings.Join(list, ","))
	if err := os.WriteFile(filepath.Join(dir, "rackd-image.json"), []byte(manifest), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if _, err := l.api.ImportImage(l.t.Context(), dir); err != nil {
		l.t.Fatalf("import %s: %v", name, err)
	}
}

// cmdline is the kernel command line rackd's iPXE config gives the
// machine, or "" when the config boots from local disk.
func (l *phaseLab) cmdline() string {
	resp, err := http.Get(l.url + "/boot/ipxe?mac=" + phaseMAC)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "kernel "); ok {
			rest, _, _ = strings.Cut(rest, " || ")
			var args []string
			for _, a := range strings.Fields(rest)[1:] {
				if !strings.HasPrefix(a, "initrd=") {
					args = append(args, a)
				}
			}
			return strings.Join(args, " ")
		}
	}
	return ""
}

func (l *phaseLab) action(action string, req api.ActionRequest) {
	l.t.Helper()
	if _, err := l.api.MachineAction(l.t.Context(), "node1", action, req); err != nil {
		l.t.Fatalf("%s: %v", action, err)
	}
}

func (l *phaseLab) machine() store.Machine {
	l.t.Helper()
	m, err := l.a.Store().Machine("node1")
	if err != nil {
		l.t.Fatal(err)
	}
	return m
}

func (l *phaseLab) lastEvent() store.Event {
	l.t.Helper()
	ev, err := l.a.Store().Events("node1", 1)
	if err != nil || len(ev) != 1 {
		l.t.Fatal(ev, err)
	}
	return ev[0]
}

// boot runs the program as the machine would with cmdline, the lab's disk
// file as vda. Without DHCP the program tells its interface from BOOTIF=,
// which a phase's command line gets here as pxelinux's IPAPPEND 2 adds it.
func (l *phaseLab) boot(cmdline string) (*harness, error) {
	if strings.Contains(cmdline, "rackd.mode=") {
		cmdline += " BOOTIF=01-" + strings.ReplaceAll(phaseMAC, ":", "-")
	}
	var h harness
	sys := h.system(machineFS(cmdline))
	sys.bmcSetup = l.bmcSetup
	sys.openDisk = func(name string) (disk, error) {
		if name != "vda" {
			return nil, fmt.Errorf("no disk %s", name)
		}
		return os.OpenFile(l.disk, os.O_WRONLY, 0)
	}
	err := run(l.t.Context(), []string{"-dhcp=false", "-tries", "2"}, sys)
	return &h, err
}

func (l *phaseLab) diskHead(n int) []byte {
	f, err := os.Open(l.disk)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		l.t.Fatal(err)
	}
	return b
}

func phaseLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, m := range []string{enlist.MarkerCommissioned, enlist.MarkerDeployed, enlist.MarkerErased,
			enlist.MarkerPhaseFailed, enlist.MarkerFailed} {
			if strings.HasPrefix(lines[i], m) {
				return lines[i]
			}
		}
	}
	return ""
}

func TestPhasesCommissionDeployRelease(t *testing.T) {
	l := newPhaseLab(t)
	ctx := t.Context()

	// Commissioning: the rendered command line carries the mode and the
	// machine, never its credential, which the program claims; the report
	// makes the machine READY with the full inventory, and its sticky
	// address (the setting is on by default).
	if _, err := l.api.CreateSubnet(ctx, api.Subnet{CIDR: "10.77.0.0/24",
		DynamicRanges: []api.Range{{Start: "10.77.0.100", End: "10.77.0.199"}}}); err != nil {
		t.Fatal(err)
	}
	l.action("commission", api.ActionRequest{})
	cl := l.cmdline()
	m := l.machine()
	tok := l.a.Store().PhaseToken(m)
	if !strings.Contains(cl, "rackd.mode=commission rackd.machine="+m.ID+" console=ttyS0") ||
		tok == "" || strings.Contains(cl, tok) || strings.Contains(cl, "rackd.token") {
		t.Fatalf("commissioning command line %q", cl)
	}
	h, err := l.boot(cl)
	if err != nil {
		t.Fatalf("commission: %v\n%s", err, h.out.String())
	}
	if got := phaseLine(h.out.String()); got != enlist.MarkerCommissioned+"READY), powering off" ||
		!reflect.DeepEqual(h.power.actions(), []string{"poweroff"}) {
		t.Fatalf("final %q actions %v\n%s", got, h.power.actions(), h.out.String())
	}
	v, err := l.api.GetMachine(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "READY" || v.CPUCount != 2 || v.MemoryMB != 256 || len(v.MACs) != 2 || v.Inventory == nil ||
		len(v.Inventory.Disks) != 1 || v.Inventory.Disks[0].Name != "vda" || v.Inventory.Disks[0].SizeBytes != diskBytes ||
		v.Inventory.Vendor != "QEMU" || v.Inventory.SystemUUID != "5c7a1f2e-0b3d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Fatalf("after commissioning: %+v inventory %+v", v, v.Inventory)
	}
	if len(v.IPs) != 1 || v.IPs[0].Kind != "sticky" || v.IPs[0].MAC != phaseMAC {
		t.Fatalf("no sticky address after commissioning: %+v", v.IPs)
	}
	if l.cmdline() != "" {
		t.Fatal("a READY machine is still served an environment")
	}
	// The phase is over: a second boot of a stale commissioning
	// environment gets no credential and changes nothing.
	h, err = l.boot(cl)
	if m := l.machine(); m.State != store.StateReady || err == nil ||
		!strings.HasPrefix(phaseLine(h.out.String()), enlist.MarkerCredentialRefused) || len(h.power.actions()) != 0 {
		t.Fatalf("stale environment: %s, %v, final %q\n%s", m.State, err, phaseLine(h.out.String()), h.out.String())
	}

	// Deployment of the raw image: written, verified, synced, reported;
	// DEPLOYED; rackd then answers "boot from local disk".
	if _, _, err := l.api.Allocate(ctx, api.AllocateRequest{Name: "node1", AgentName: "t"}); err != nil {
		t.Fatal(err)
	}
	l.action("deploy", api.ActionRequest{Image: "raw"})
	cl = l.cmdline()
	if !strings.Contains(cl, "rackd.mode=deploy") || !strings.Contains(cl, "rackd.image=images/"+l.rawSHA) ||
		!strings.Contains(cl, fmt.Sprintf("rackd.image_size=%d", len(l.raw))) {
		t.Fatalf("deploy command line %q", cl)
	}
	h, err = l.boot(cl + " enlist.measure_download=1")
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, h.out.String())
	}
	if want := fmt.Sprintf("download only: %d bytes in ", len(l.raw)); !strings.Contains(h.out.String(), want) {
		t.Errorf("no download-only measurement (%q) with enlist.measure_download=1:\n%s", want, h.out.String())
	}
	// The import recorded the image's chunk list, and the environment
	// verified the image with it.
	if n := chunksum.Count(int64(len(l.raw)), chunksum.Size); !strings.Contains(cl, "rackd.image_chunks=") ||
		!strings.Contains(h.out.String(), fmt.Sprintf("sha256 of %d chunks verified", n)) {
		t.Errorf("deploy command line %q: the image was not verified by its chunk list:\n%s", cl, h.out.String())
	}
	if got := phaseLine(h.out.String()); got != fmt.Sprintf("%s%d bytes to vda, rebooting", enlist.MarkerDeployed, len(l.raw)) ||
		!reflect.DeepEqual(h.power.actions(), []string{"reboot"}) {
		t.Fatalf("final %q actions %v\n%s", got, h.power.actions(), h.out.String())
	}
	// The image, its partition table holding the seed's partition.
	if head := l.diskHead(len(l.raw)); !bytes.Equal(head[:446], l.raw[:446]) || !bytes.Equal(head[510:], l.raw[510:]) {
		t.Fatal("the disk does not hold the image")
	}
	// The seed was written with it: the machine boots its disk and waits
	// for the OS to report.
	if m := l.machine(); m.State != store.StateDeploying || m.DiskWritten.IsZero() {
		t.Fatalf("after the image written: %s %v", m.State, m.DiskWritten)
	}
	if e := l.lastEvent(); e.Reason != "rebooting to disk" {
		t.Fatalf("event %+v", e)
	}
	if l.cmdline() != "" {
		t.Fatal("a machine whose image is written is not told to boot from its disk")
	}
	// The OS's cloud-init posts phone_home to the URL its seed gives
	// (vendor-data is stored as is in the seed's FAT, in a partition at
	// the disk's end, so it is found in the last MiBs' bytes): DEPLOYED.
	df, err := os.Open(l.disk)
	if err != nil {
		t.Fatal(err)
	}
	disk := make([]byte, 8<<20)
	_, err = df.ReadAt(disk, diskBytes-int64(len(disk)))
	df.Close()
	if err != nil {
		t.Fatal(err)
	}
	u := regexp.MustCompile(`"(http://[^"\s]+/metadata/v1/os/[^"\s]+/phone-home)"`).FindSubmatch(disk)
	if u == nil {
		t.Fatal("no phone_home URL in the seed on the disk")
	}
	resp, err := http.PostForm(string(u[1]), url.Values{"instance_id": {"i-x"}, "hostname": {"node1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m := l.machine(); resp.StatusCode != 200 || m.State != store.StateDeployed || m.Credential != nil {
		t.Fatalf("after phone-home (%d): %s %+v", resp.StatusCode, m.State, m.Credential)
	}
	evs, err := l.a.Store().Events(l.machine().ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The event gives the write's own time, as the environment measured
	// it, and apart the time before it (power-on and boot).
	writtenRE := regexp.MustCompile(`^image written \(\d+ MB in \d+\.\d\d s; power-on and boot before it: \d+ s\): `)
	written := false
	for _, e := range evs {
		written = written || (writtenRE.MatchString(e.Reason) && strings.Contains(e.Reason, l.rawSHA))
	}
	if !written {
		t.Fatalf("no image written event with the write's own time naming the image's sha256 (%s): %+v", writtenRE, evs)
	}

	// Release with an erase: the erase environment wipes both ends of the
	// disk and completes the release.
	l.action("release", api.ActionRequest{Erase: true})
	// Landing in the enlistment environment instead (slow firmware, seed
	// 001), the machine is told to reboot into its erase environment.
	h, err = l.boot("rackd.url=" + l.url)
	if got := lastLine(h.out.String()); err != nil || got != enlist.MarkerKnown+"RELEASING), rebooting" {
		t.Fatalf("erasing machine in the enlistment environment: %q %v\n%s", got, err, h.out.String())
	}
	cl = l.cmdline()
	if !strings.Contains(cl, "rackd.mode=erase") {
		t.Fatalf("erase command line %q", cl)
	}
	h, err = l.boot(cl)
	if err != nil {
		t.Fatalf("erase: %v\n%s", err, h.out.String())
	}
	if got := phaseLine(h.out.String()); got != enlist.MarkerErased+"vda, powering off" {
		t.Fatalf("final %q\n%s", got, h.out.String())
	}
	if !bytes.Equal(l.diskHead(deploy.HeadSize), make([]byte, deploy.HeadSize)) {
		t.Fatal("the head of the disk is not erased")
	}
	if m := l.machine(); m.State != store.StateReady || m.Erase {
		t.Fatalf("after erase: %s", m.State)
	}

	// Metrics per phase.
	resp, err = http.Get(l.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`rackd_phase_duration_seconds_count{outcome="done",phase="commission"} 1`,
		`rackd_phase_duration_seconds_count{outcome="done",phase="deploy"} 1`,
		`rackd_phase_duration_seconds_count{outcome="done",phase="erase"} 1`,
		`rackd_metadata_requests_total{endpoint="credential",outcome="granted"} 3`,
		`rackd_metadata_requests_total{endpoint="credential",outcome="refused"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A corrupted image (its blob changed on rackd's disk after import, so the
// bytes streamed no longer hash to the manifest's sha256) fails the
// deployment with the reason, and leaves the disk with nothing to boot.
func TestPhasesCorruptImage(t *testing.T) {
	l := newPhaseLab(t)
	ctx := t.Context()
	l.action("commission", api.ActionRequest{})
	if h, err := l.boot(l.cmdline()); err != nil {
		t.Fatalf("commission: %v\n%s", err, h.out.String())
	}
	if _, _, err := l.api.Allocate(ctx, api.AllocateRequest{Name: "node1", AgentName: "t"}); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(filepath.Dir(l.a.AdminTokenPath()), "images", "sha256", l.rawSHA)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatalf("the blob is not where expected: %v", err)
	}
	data[3<<20] ^= 0xFF
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l.action("deploy", api.ActionRequest{Image: "raw"})
	h, err := l.boot(l.cmdline())
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, h.out.String())
	}
	if got := phaseLine(h.out.String()); !strings.HasPrefix(got, enlist.MarkerPhaseFailed+"deploy: sha256 mismatch") ||
		!strings.HasSuffix(got, "(reported), powering off") || !reflect.DeepEqual(h.power.actions(), []string{"poweroff"}) {
		t.Fatalf("final %q actions %v\n%s", got, h.power.actions(), h.out.String())
	}
	m := l.machine()
	if m.State != store.StateFailedDeployment {
		t.Fatalf("state %s", m.State)
	}
	// The image has a chunk list (the import's): the reason names the
	// image and the chunk that holds the changed byte.
	if e := l.lastEvent(); !strings.Contains(e.Reason, "deploy failed: sha256 mismatch: chunk 0 (bytes 0 to 4194304)") ||
		!strings.Contains(e.Reason, l.rawSHA) {
		t.Fatalf("event %+v", e)
	}
	if !bytes.Equal(l.diskHead(deploy.HeadSize), make([]byte, deploy.HeadSize)) {
		t.Fatal("a failed deployment left the head of the disk bootable")
	}
	if l.cmdline() != "" {
		t.Fatal("FAILED_DEPLOYMENT is served an environment")
	}
	resp, err := http.Get(l.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `rackd_phase_failures_total{phase="deploy",reason="reported"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// An environment whose credential someone else claimed first is refused
// at once (no retry), says so, and does nothing; the machine's events name
// both claims. A report with a token that is not the machine's is refused
// and recorded as an event, and the commissioning goes on.
func TestPhasesBadCredential(t *testing.T) {
	l := newPhaseLab(t)
	l.action("commission", api.ActionRequest{})
	cl := l.cmdline()
	var body bytes.Buffer
	json.NewEncoder(&body).Encode(enlist.CredentialRequest{Machine: l.machine().ID, MAC: phaseMAC})
	resp, err := http.Post(l.url+enlist.PathCredential, "application/json", &body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first claim: %s", resp.Status)
	}
	h, err := l.boot(cl)
	out := h.out.String()
	if err == nil || !strings.HasPrefix(phaseLine(out), enlist.MarkerCredentialRefused) || !strings.Contains(out, "409 conflict") ||
		!strings.Contains(out, "REFUSED") || len(h.power.actions()) != 0 || strings.Count(out, "claiming the") != 1 {
		t.Fatalf("err %v actions %v\n%s", err, h.power.actions(), out)
	}
	if e := l.lastEvent(); e.Action != "credential-refused" || !strings.Contains(e.Reason, "already claimed by 127.0.0.1") {
		t.Fatalf("event %+v", e)
	}
	if m := l.machine(); m.State != store.StateCommissioning {
		t.Fatalf("state %s", m.State)
	}

	body.Reset()
	json.NewEncoder(&body).Encode(enlist.Report{Machine: l.machine().ID, Error: "forged"})
	req, _ := http.NewRequest(http.MethodPost, l.url+enlist.PathCommissioned, &body)
	req.Header.Set("Authorization", "Bearer forged")
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged token: %s", resp.Status)
	}
	// A forged token proves nothing: refused and recorded, and the phase
	// goes on (it ends by its timeout or the operator's next action).
	if m := l.machine(); m.State != store.StateCommissioning {
		t.Fatalf("state %s", m.State)
	}
	if e := l.lastEvent(); e.Action != "report-refused" || !strings.Contains(e.Reason, "rejected credential") {
		t.Fatalf("event %+v", e)
	}
	// No credential at all: refused before anything changes.
	body.Reset()
	json.NewEncoder(&body).Encode(enlist.Report{Machine: l.machine().ID})
	resp, err = http.Post(l.url+enlist.PathCommissioned, "application/json", &body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
}

// FuzzPhaseArgs: whatever the kernel command line says, the phase arguments
// either parse into something safe to act on or are refused.
func FuzzPhaseArgs(f *testing.F) {
	sha := strings.Repeat("ab", 32)
	for _, s := range []string{
		"rackd.mode=deploy rackd.machine=m-a rackd.image=images/" + sha + " rackd.image_sha256=" + sha + " rackd.image_size=10",
		"rackd.machine=m-a rackd.image=../x rackd.image_sha256=zz rackd.image_size=-1",
		`rackd.machine="m a" rackd.disk=vda`, "",
	} {
		f.Add(s, "deploy", "")
		f.Add(s, "erase", "auto")
	}
	f.Fuzz(func(t *testing.T, cmdline, mode, disk string) {
		p, err := parsePhaseArgs(mode, cmdline, disk)
		if err != nil {
			return
		}
		if p.machine == "" || p.token != "" {
			t.Fatalf("accepted without a machine, or took a token from the command line: %+v", p)
		}
		if mode == enlist.ModeDeploy && (p.img.Check() != nil || strings.Contains(p.image, "..") ||
			strings.HasPrefix(p.image, "/") || p.image == "") {
			t.Fatalf("accepted unsafe deploy arguments: %+v", p)
		}
	})
}

// With enlist.auto_commission, an unknown machine enlists, is told to
// reboot, boots its commissioning environment and ends READY: no human
// between power-on and READY.
func TestPhasesAutoCommission(t *testing.T) {
	l := newPhaseLab(t, func(c *agent.Config) { c.Enlist.AutoCommission = true })
	h, err := l.boot("rackd.url=" + l.url)
	if err != nil {
		t.Fatalf("enlist: %v\n%s", err, h.out.String())
	}
	final := lastLine(h.out.String())
	id, ok := strings.CutPrefix(final, enlist.MarkerEnlisted)
	id, ok2 := strings.CutSuffix(id, ", "+enlist.SuffixReboot)
	if !ok || !ok2 {
		t.Fatalf("final %q\n%s", final, h.out.String())
	}
	m, err := l.a.Store().Machine(id)
	if err != nil || m.State != store.StateCommissioning {
		t.Fatalf("%+v %v", m, err)
	}
	// The next PXE round: rackd's config for the machine.
	cl := l.cmdline()
	if !strings.Contains(cl, "rackd.mode=commission rackd.machine="+id) {
		t.Fatalf("command line %q", cl)
	}
	h, err = l.boot(cl)
	if err != nil || phaseLine(h.out.String()) != enlist.MarkerCommissioned+"READY), powering off" {
		t.Fatalf("commission: %v\n%s", err, h.out.String())
	}
	if m, _ := l.a.Store().Machine(id); m.State != store.StateReady || !m.Commissioned {
		t.Fatalf("after commissioning: %s", m.State)
	}
}

// The rackd.image_* arguments of a compressed image parse into what the
// writer checks; wrong ones are refused with the argument named.
func TestPhaseArgsImage(t *testing.T) {
	sha, raw := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	base := "rackd.machine=m-a rackd.image=images/" + sha + " rackd.image_sha256=" + sha + " rackd.image_size=10"
	for _, tc := range []struct {
		args string
		want deploy.Image
		err  string
	}{
		{"", deploy.Image{Format: deploy.FormatRaw, Size: 10, SHA256: sha}, ""},
		{" rackd.image_format=raw rackd.image_raw_size=10", deploy.Image{Format: deploy.FormatRaw, Size: 10, SHA256: sha, RawSize: 10}, ""},
		{" rackd.image_format=zstd rackd.image_raw_size=4096 rackd.image_raw_sha256=" + raw,
			deploy.Image{Format: deploy.FormatZstd, Size: 10, SHA256: sha, RawSize: 4096, RawSHA256: raw}, ""},
		{" rackd.image_format=xz rackd.image_raw_size=99", deploy.Image{Format: deploy.FormatXZ, Size: 10, SHA256: sha, RawSize: 99}, ""},
		{" rackd.image_format=gzip", deploy.Image{}, "decompressed size is needed"},
		{" rackd.image_format=bzip2 rackd.image_raw_size=99", deploy.Image{}, "rackd.image_format"},
		{" rackd.image_format=gzip rackd.image_raw_size=-3", deploy.Image{}, "rackd.image_raw_size"},
		{" rackd.image_format=gzip rackd.image_raw_size=9 rackd.image_raw_sha256=XYZ", deploy.Image{}, "decompressed image sha256"},
		{" rackd.image_raw_size=11", deploy.Image{}, "announced as 11 bytes"},
	} {
		p, err := parsePhaseArgs(enlist.ModeDeploy, base+tc.args, "")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || p.img != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.args, p.img, err, tc.want)
		}
	}
}

// A zstd image served over HTTP is decompressed onto the disk, chosen by
// its decompressed size and the seed's; the seed rackd serves lands at
// the disk's end; a truncated image fails with the head zeroed.
func TestDeployImageCompressed(t *testing.T) {
	zstd, err := exec.LookPath("zstd")
	if err != nil {
		t.Skipf("zstd not installed (scripts/test-deps.sh installs it): %v", err)
	}
	raw := make([]byte, 6<<20+7)
	for i := range raw {
		raw[i] = byte(i / 4096)
	}
	// A boot sector with an empty partition table: the seed gets slot 1.
	clear(raw[:512])
	raw[510], raw[511] = 0x55, 0xAA
	cmd := exec.Command(zstd, "-c", "-q")
	cmd.Stdin = bytes.NewReader(raw)
	file, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	seed := bytes.Repeat([]byte("seed"), 300000)
	files := map[string][]byte{"/boot/images/a.zst": file, "/boot/images/cut.zst": file[:len(file)/2]}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == enlist.PathSeed && r.Header.Get("Authorization") == "Bearer seeded" {
			w.Write(seed)
			return
		}
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	hexSum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	for _, tc := range []struct {
		name, token, path string
		body              []byte
		disks             []enlist.Disk
		want              string
	}{
		// vda is larger than the file, smaller than the image: not chosen.
		{"ok", "t", "images/a.zst", file, []enlist.Disk{{Name: "vda", SizeBytes: 1 << 20}, {Name: "vdb", SizeBytes: 8 << 20}}, ""},
		// vda holds the image, not the image and the seed.
		{"seeded", "seeded", "images/a.zst", file, []enlist.Disk{{Name: "vda", SizeBytes: 7 << 20}, {Name: "vdb", SizeBytes: 10 << 20}}, ""},
		{"truncated", "t", "images/cut.zst", file[:len(file)/2], []enlist.Disk{{Name: "vdb", SizeBytes: 8 << 20}}, "decompress the zstd image"},
		{"no room for the seed", "seeded", "images/a.zst", file, []enlist.Disk{{Name: "vdb", SizeBytes: 7 << 20}}, "no disk holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fmt.Sprintf("rackd.machine=m-a rackd.image=%s rackd.image_sha256=%s rackd.image_size=%d rackd.image_format=zstd rackd.image_raw_size=%d rackd.image_raw_sha256=%s",
				tc.path, hexSum(tc.body), len(tc.body), len(raw), hexSum(raw))
			p, err := parsePhaseArgs(enlist.ModeDeploy, cl, "")
			if err != nil {
				t.Fatal(err)
			}
			p.token = tc.token // as the claim would have granted it
			diskPath := filepath.Join(t.TempDir(), "vdb")
			var size int64
			for _, d := range tc.disks {
				if d.Name == "vdb" {
					size = d.SizeBytes
				}
			}
			if err := os.WriteFile(diskPath, bytes.Repeat([]byte{0xEE}, int(size)), 0o644); err != nil {
				t.Fatal(err)
			}
			sys := system{openDisk: func(name string) (disk, error) {
				if name != "vdb" {
					return nil, fmt.Errorf("wrong disk %s", name)
				}
				return os.OpenFile(diskPath, os.O_WRONLY, 0)
			}}
			var said []string
			client := &enlist.Client{Base: base, Backoff: enlist.Backoff{Tries: 1}}
			res, name, err := deployImage(t.Context(), sys, p, base, client, enlist.Inventory{Disks: tc.disks},
				func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) })
			got, _ := os.ReadFile(diskPath)
			console := strings.Join(said, "\n")
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !bytes.Equal(got[:deploy.HeadSize], bytes.Repeat(got[:1], deploy.HeadSize)) {
					t.Fatalf("err %v, want %q (and a zeroed or untouched head)", err, tc.want)
				}
				return
			}
			if err != nil || name != "vdb" || res.Bytes != int64(len(raw)) || !bytes.Equal(got[512:len(raw)], raw[512:]) ||
				!strings.Contains(console, "downloaded "+fmt.Sprint(len(file))+" bytes of zstd") {
				t.Fatalf("%+v %s %v\n%s", res, name, err, console)
			}
			if tc.token != "seeded" {
				if res.Seed != nil || !strings.Contains(console, "no seed for this deployment: deploying the image without one") ||
					!bytes.Equal(got[:512], raw[:512]) {
					t.Fatalf("%+v\n%s", res.Seed, console)
				}
				return
			}
			want := deploy.SeedPlacement{Table: "mbr", Partition: 1, Start: 8 << 20, Size: 2 << 20}
			if res.Seed == nil || *res.Seed != want || !bytes.Equal(got[8<<20:8<<20+len(seed)], seed) ||
				!strings.Contains(console, "seed written to CIDATA partition 1 (mbr), bytes 8388608 to 10485760") {
				t.Fatalf("%+v\n%s", res.Seed, console)
			}
			if got[446+4] != 0x0c || !bytes.Equal(got[:446], raw[:446]) {
				t.Fatalf("partition table % x", got[446:512])
			}
		})
	}
}

// With rackd.image_chunks=, the environment fetches the chunk list served
// next to the image, checks its digest and size, and verifies the image
// chunk by chunk; a list that is not the one named, or not of this image,
// fails the deployment before anything is written, and a corrupt chunk
// fails it with the head zeroed.
func TestDeployImageChunked(t *testing.T) {
	raw := make([]byte, 9<<20+7)
	for i := range raw {
		raw[i] = byte(i/4096 + i%7)
	}
	clear(raw[:512])
	raw[510], raw[511] = 0x55, 0xAA
	hexSum := func(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
	listOf := func(b []byte) []byte { w := &chunksum.Writer{}; w.Write(b); return w.List().Marshal() }
	list, otherList := listOf(raw), listOf(raw[:len(raw)-1])
	corrupt := bytes.Clone(raw)
	corrupt[5<<20] ^= 1
	files := map[string][]byte{
		"/boot/images/" + hexSum(raw): raw, "/boot/images/" + hexSum(list): list, "/boot/images/" + hexSum(otherList): otherList,
		"/boot/images/bad": corrupt, "/boot/images/" + strings.Repeat("0", 64): []byte("rackd-chunks/1 sha256 4194304 1\n"),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	for _, tc := range []struct {
		name, image, chunks string
		want                string
		zeroed              bool // the head zeroed, else untouched
	}{
		{"ok", hexSum(raw), hexSum(list), "", false},
		{"corrupt chunk", "bad", hexSum(list), "sha256 mismatch: chunk 1 (bytes 4194304 to 8388608)", true},
		{"list of another image", hexSum(raw), hexSum(otherList), "the chunk list describes a 9437190-byte image", false},
		{"list not the one named", hexSum(raw), strings.Repeat("0", 64), "sha256 mismatch: the chunk list hashes to", false},
		{"no such list", hexSum(raw), strings.Repeat("1", 64), "404 Not Found", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fmt.Sprintf("rackd.machine=m-a rackd.image=images/%s rackd.image_sha256=%s rackd.image_size=%d rackd.image_chunks=%s",
				tc.image, hexSum(raw), len(raw), tc.chunks)
			p, err := parsePhaseArgs(enlist.ModeDeploy, cl, "")
			if err != nil || p.chunks != tc.chunks {
				t.Fatalf("%+v %v", p, err)
			}
			p.token = "t"
			diskPath := filepath.Join(t.TempDir(), "vda")
			if err := os.WriteFile(diskPath, bytes.Repeat([]byte{0xEE}, 12<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			sys := system{openDisk: func(name string) (disk, error) { return os.OpenFile(diskPath, os.O_WRONLY, 0) }}
			var said []string
			client := &enlist.Client{Base: base, Backoff: enlist.Backoff{Tries: 1}}
			res, _, err := deployImage(t.Context(), sys, p, base, client, enlist.Inventory{Disks: []enlist.Disk{{Name: "vda", SizeBytes: 12 << 20}}},
				func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) })
			got, _ := os.ReadFile(diskPath)
			console := strings.Join(said, "\n")
			if tc.want != "" {
				head := bytes.Repeat([]byte{0xEE}, deploy.HeadSize)
				if tc.zeroed {
					head = make([]byte, deploy.HeadSize)
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) || !bytes.Equal(got[:deploy.HeadSize], head) {
					t.Fatalf("err %v, want %q (and the head zeroed: %v)\n%s", err, tc.want, tc.zeroed, console)
				}
				return
			}
			if err != nil || res.Chunks != 3 || !bytes.Equal(got[:len(raw)], raw) ||
				!strings.Contains(console, "chunk list: 3 chunks of 4194304 bytes") || !strings.Contains(console, "sha256 of 3 chunks verified") {
				t.Fatalf("%+v %v\n%s", res, err, console)
			}
		})
	}
	for _, bad := range []string{"AB", strings.Repeat("g", 64), strings.Repeat("A", 64)} {
		cl := fmt.Sprintf("rackd.machine=m-a rackd.image=images/x rackd.image_sha256=%s rackd.image_size=1 rackd.image_chunks=%s", hexSum(raw), bad)
		if _, err := parsePhaseArgs(enlist.ModeDeploy, cl, ""); err == nil || !strings.Contains(err.Error(), "rackd.image_chunks") {
			t.Errorf("rackd.image_chunks=%s: %v", bad, err)
		}
	}
}

// The BMC set-up end to end between the program and rackd: a machine
// nobody configured gets the credentials the set-up made as its power
// configuration; one an operator configured is left alone (the set-up
// does not even run) unless the commission is forced.
func TestPhasesBMCSetup(t *testing.T) {
	const password = "S3tUpPassw0rdXyz"
	var calls int
	setup := func() (bmc.Result, error) {
		calls++
		return bmc.Result{Channel: 1, Address: netip.MustParseAddr("10.0.0.13"), IPSource: bmc.IPSourceDHCP, UserID: 3,
			User: bmc.DefaultUser, Password: password, IPMI20: true, Notes: []string{"user 3 created"}}, nil
	}
	t.Run("no power configuration", func(t *testing.T) {
		calls = 0
		l := newPhaseLab(t, func(c *agent.Config) { c.Enlist.AutoCommission = true })
		l.bmcSetup = setup
		h, err := l.boot("rackd.url=" + l.url)
		if err != nil {
			t.Fatalf("enlist: %v\n%s", err, h.out.String())
		}
		h, err = l.boot(l.cmdline())
		if err != nil || phaseLine(h.out.String()) != enlist.MarkerCommissioned+"READY), powering off" {
			t.Fatalf("commission: %v\n%s", err, h.out.String())
		}
		out := h.out.String()
		if calls != 1 || !strings.Contains(out, "BMC set up: BMC 10.0.0.13 (dhcp) on LAN channel 1: user 3") || strings.Contains(out, password) {
			t.Fatalf("set-up calls %d, console:\n%s", calls, out)
		}
		ms, err := l.a.Store().ListMachines(store.Filter{})
		if err != nil || len(ms) != 1 {
			t.Fatal(ms, err)
		}
		m, err := l.a.Store().MachineForPower(ms[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		want := store.PowerParams{Driver: "ipmi", Address: "10.0.0.13", Username: "rackd", Password: password}
		if m.Power != want || m.PowerSetBy != store.PowerSetByCommissioning {
			t.Fatalf("power %+v set by %q", m.Power, m.PowerSetBy)
		}
		// The API shows who set it, never the credentials.
		v, err := l.api.GetMachine(t.Context(), m.ID)
		if err != nil || v.Power.Driver != "ipmi" || v.Power.SetBy != "commissioning" {
			t.Fatalf("API view %+v %v", v.Power, err)
		}
		if b, _ := json.Marshal(v); strings.Contains(string(b), password) || strings.Contains(string(b), `"rackd"`) {
			t.Fatalf("the API shows a BMC secret: %s", b)
		}
	})
	t.Run("operator's configuration, then forced", func(t *testing.T) {
		calls = 0
		l := newPhaseLab(t) // node1, powered by hand: the operator's choice
		l.bmcSetup = setup
		l.action("commission", api.ActionRequest{})
		h, err := l.boot(l.cmdline())
		if err != nil || calls != 0 || l.machine().Power.Driver != "manual" {
			t.Fatalf("commission: %v, set-up calls %d, power %+v\n%s", err, calls, l.machine().Power, h.out.String())
		}
		l.action("commission", api.ActionRequest{ForceBMCSetup: true})
		h, err = l.boot(l.cmdline())
		if err != nil || calls != 1 {
			t.Fatalf("forced commission: %v, set-up calls %d\n%s", err, calls, h.out.String())
		}
		if m, err := l.a.Store().MachineForPower("node1"); err != nil || m.Power.Driver != "ipmi" || m.Power.Password != password || m.ForceBMCSetup {
			t.Fatalf("after the forced commission: %+v, force %v", m.Power, m.ForceBMCSetup)
		}
	})
}
