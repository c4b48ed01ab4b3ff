//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"rackd/appliance"
	"rackd/internal/netnstest"
	"rackd/store"
)

// TestApplianceRealRackd is the first boot under the real rackd: the
// rackd.toml the init writes is one rackd starts with, rackd's admin token
// is the one the init reads, /healthz turns 200 once the rack interface is
// bound, and the rack subnet and the slot's image land in rackd's API.
// rackd's exit for a reboot is its appliance API's factory reset. A second
// boot finds the database migrated by a newer rackd and puts back the copy
// this build opens.
func TestApplianceRealRackd(t *testing.T) {
	netnstest.Require(t)
	curl := tool(t, "curl")
	dnsmasq := netnstest.Tool(t, "dnsmasq")
	rackd := filepath.Join(t.TempDir(), "rackd")
	if out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", rackd, "rackd/agent/cmd/rackd").CombinedOutput(); err != nil {
		t.Fatalf("go build rackd: %v\n%s", err, out)
	}
	srv, box, rackPeer := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	srvIf, mgmt := netnstest.Veth(t, srv, box)
	_, rack := netnstest.Veth(t, rackPeer, box)
	srv.AddAddr(srvIf, netip.MustParsePrefix("10.79.0.1/24"))
	srv.Start(dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--port=0", "--user=root", "--group=root",
		"--interface="+srvIf, "--bind-interfaces", "--dhcp-range=10.79.0.50,10.79.0.60,255.255.255.0,2m",
		"--dhcp-leasefile="+filepath.Join(t.TempDir(), "leases"), "--dhcp-authoritative", "--no-ping")
	r := newRoot(t, mgmt, rack)
	// A real image directory: rackd checks every file's size and sha256.
	img := r.path("slot/images/enlist-amd64")
	var files []string
	for name, role := range map[string]string{"vmlinuz": "kernel", "initramfs.cpio.gz": "initrd"} {
		body := []byte("not really a " + role + "\n")
		if err := os.WriteFile(filepath.Join(img, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		files = append(files, fmt.Sprintf(`{"path": %q, "role": %q, "sha256": %q, "size": %d}`, name, role, hex.EncodeToString(sum[:]), len(body)))
	}
	manifest := `{"name": "rackd-enlist", "arch": "amd64", "purpose": "enlist", "cmdline": "console=ttyS0,115200", "files": [` + strings.Join(files, ", ") + `]}`
	if err := os.WriteFile(filepath.Join(img, "rackd-image.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	r.setEnv(t, map[string]string{"rackd_good": "a"})

	api := func(method, path, body string) string {
		t.Helper()
		token, err := os.ReadFile(r.path("data/state/admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"-fsS", "-X", method, "-H", "Authorization: Bearer " + strings.TrimSpace(string(token)), "http://127.0.0.1:5240" + path}
		if body != "" {
			args = append(args, "-H", "Content-Type: application/json", "-d", body)
		}
		out, err := box.Exec(context.Background(), curl, args...)
		if err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, out)
		}
		return string(out)
	}
	var subnets, images string
	out, code := r.bootWith(t, box, rackd, "rackd.slot=a", "", "admin token:", func() {
		subnets = api("GET", "/api/v1/subnets", "")
		images = api("GET", "/api/v1/images", "")
		api("POST", "/api/v1/appliance/reset", `{"confirm": true}`)
	})
	if code != appliance.ExitReboot || !strings.Contains(out, "rackd asked for a reboot") {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	var ss []struct {
		CIDR          string `json:"cidr"`
		DynamicRanges []struct {
			Start string `json:"start"`
			End   string `json:"end"`
		} `json:"dynamic_ranges"`
	}
	if err := json.Unmarshal([]byte(subnets), &ss); err != nil || len(ss) != 1 || ss[0].CIDR != "10.42.0.0/24" ||
		len(ss[0].DynamicRanges) != 1 || ss[0].DynamicRanges[0].Start != "10.42.0.100" || ss[0].DynamicRanges[0].End != "10.42.0.199" {
		t.Fatalf("rackd's subnets: %v %s", err, subnets)
	}
	var is []struct {
		Name, Arch, Purpose string
	}
	if err := json.Unmarshal([]byte(images), &is); err != nil || len(is) != 1 || is[0].Name != "rackd-enlist" || is[0].Arch != "amd64" || is[0].Purpose != "enlist" {
		t.Fatalf("rackd's images: %v %s", err, images)
	}
	if env := r.env(t); env["rackd_reset"] != "1" {
		t.Fatalf("grubenv after the reset request: %v", env)
	}

	// The reset request taken back, and the database as a newer rackd
	// leaves it after migrating (a copy of the old schema beside it): the
	// boot of this older slot puts the copy back before rackd starts, and
	// rackd opens it.
	r.setEnv(t, map[string]string{"rackd_good": "a"})
	db := r.path("data/state/" + store.FileName)
	body, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.SchemaCopyPath(db, store.SchemaVersion), body, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte(strconv.Itoa(store.SchemaVersion+1)))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	out, code = r.bootWith(t, box, rackd, "rackd.slot=a", "", "(admin token in /data/state/admin.token)", func() {
		api("POST", "/api/v1/appliance/reset", `{"confirm": true}`)
	})
	if code != appliance.ExitReboot || !strings.Contains(out, "the database was newer than this build: put back the copy") {
		t.Fatalf("exit code %d:\n%s", code, out)
	}
	if _, err := os.Stat(store.SchemaCopyPath(db, store.SchemaVersion+1) + ".rolled-back"); err != nil {
		t.Fatalf("the newer database is not kept aside: %v", err)
	}
}
