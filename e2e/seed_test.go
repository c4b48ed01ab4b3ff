package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"rackd/api"
	"rackd/internal/netnstest"
)

// waitImageWritten polls a DEPLOYING machine until its deploy environment
// has reported the image written (it then boots its disk and rackd waits
// for the OS to report), failing at once on FAILED_DEPLOYMENT.
func (l *lab) waitImageWritten(id string) api.Machine {
	l.t.Helper()
	deadline := time.Now().Add(bootTimeout)
	for {
		var m api.Machine
		l.call(http.StatusOK, "GET", "/api/v1/machines/"+id, nil, &m)
		switch {
		case m.State == "DEPLOYING" && m.Deployment != nil && m.Deployment.ImageWritten != nil:
			return m
		case m.State == "DEPLOYED":
			l.t.Fatalf("machine %s is DEPLOYED at the image written: its deploy environment fetched no seed "+
				"(an enlistment image from before seeds? rebuild it: make initramfs)", id)
		case m.State != "DEPLOYING":
			var evs []api.Event
			l.call(http.StatusOK, "GET", "/api/v1/machines/"+id+"/events", nil, &evs)
			l.t.Fatalf("machine %s is %s, waiting for its image to be written; events: %+v", id, m.State, evs)
		case time.Now().After(deadline):
			l.t.Fatalf("machine %s: image not written after %v (deployment %+v)", id, bootTimeout, m.Deployment)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

var seedPhoneHome = regexp.MustCompile(`(?m)^  url: "([^"]+)"$`)

// phoneHomeFromDisk does what a deployed OS's cloud-init does with the seed
// the deploy environment wrote to the end of the VM's disk, for an OS that
// has no cloud-init (the marker image): it finds the seed's partition
// (sfdisk), reads vendor-data out of its FAT filesystem (mtools), and posts
// phone_home's form to the URL there. It returns the answer's status.
func (l *lab) phoneHomeFromDisk(v *bmcVM, instanceID string) int {
	l.t.Helper()
	sfdisk, mcopy := netnstest.Tool(l.t, "sfdisk"), netnstest.Tool(l.t, "mcopy")
	out, err := exec.Command(sfdisk, "--json", v.disk).Output()
	if err != nil {
		l.t.Fatalf("sfdisk --json %s: %v", v.disk, err)
	}
	var pt struct {
		PartitionTable struct {
			Label      string `json:"label"`
			SectorSize int64  `json:"sectorsize"`
			Partitions []struct {
				Start, Size int64
				Type, Name  string
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		l.t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	var start, size int64
	for _, p := range pt.PartitionTable.Partitions {
		if p.Name == "CIDATA" || (pt.PartitionTable.Label == "dos" && p.Type == "c") {
			start, size = p.Start, p.Size
		}
	}
	ss := max(pt.PartitionTable.SectorSize, 512)
	if size == 0 {
		l.t.Fatalf("no seed partition on the VM's disk:\n%s", out)
	}
	f, err := os.Open(v.disk)
	if err != nil {
		l.t.Fatal(err)
	}
	seed := filepath.Join(l.t.TempDir(), "seed.img")
	dst, err := os.Create(seed)
	if err != nil {
		l.t.Fatal(err)
	}
	_, err = io.Copy(dst, io.NewSectionReader(f, start*ss, size*ss))
	f.Close()
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.t.Fatalf("copy the seed partition: %v", err)
	}
	vd, err := exec.Command(mcopy, "-n", "-i", seed, "::vendor-data", "-").Output()
	if err != nil {
		l.t.Fatalf("mcopy vendor-data out of the seed: %v", err)
	}
	m := seedPhoneHome.FindSubmatch(vd)
	if m == nil || !strings.HasPrefix(string(m[1]), l.url+"/metadata/v1/os/") {
		l.t.Fatalf("the seed's vendor-data has no phone_home URL under %s:\n%s", l.url, vd)
	}
	resp, err := l.client.PostForm(string(m[1]), url.Values{"instance_id": {instanceID}, "hostname": {"vm1"}, "fqdn": {"vm1.internal"}})
	if err != nil {
		l.t.Fatalf("phone-home: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
