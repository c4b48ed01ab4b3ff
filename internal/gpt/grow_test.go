package gpt

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rackd/internal/netnstest"
)

// applianceLayout is the appliance image's partition table in sfdisk's
// script format, with a small data partition at the end.
const applianceLayout = `label: gpt
unit: sectors
first-lba: 2048
start=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name="bios"
start=4096, size=4096, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=8192, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-a"
start=12288, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-b"
start=16384, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-data"
`

// sfdiskImage makes an image of size bytes partitioned by the real sfdisk.
func sfdiskImage(t *testing.T, size int64, script string) string {
	t.Helper()
	sfdisk := netnstest.Tool(t, "sfdisk")
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sfdisk, "--no-reread", "--no-tell-kernel", img)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	return img
}

type sfdiskTable struct {
	PartitionTable struct {
		LastLBA    int64 `json:"lastlba"`
		Partitions []struct {
			Node  string `json:"node"`
			Start int64  `json:"start"`
			Size  int64  `json:"size"`
			Name  string `json:"name"`
		} `json:"partitions"`
	} `json:"partitiontable"`
}

func readTable(t *testing.T, img string) sfdiskTable {
	t.Helper()
	out, err := exec.Command(netnstest.Tool(t, "sfdisk"), "--json", img).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var tab sfdiskTable
	if err := json.Unmarshal(out, &tab); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	return tab
}

// verify runs both real partitioners' checks on the image.
func verify(t *testing.T, img string) {
	t.Helper()
	if out, err := exec.Command(netnstest.Tool(t, "sfdisk"), "--verify", img).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Fatalf("sfdisk --verify: %v\n%s", err, out)
	}
	out, err := exec.Command(netnstest.Tool(t, "sgdisk"), "-v", img).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Fatalf("sgdisk -v: %v\n%s", err, out)
	}
}

func growFile(t *testing.T, img, name string) (Entry, bool, error) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return Grow(f, st.Size(), name)
}

func TestGrowToDiskEnd(t *testing.T) {
	const small, big = 12 << 20, 64 << 20
	img := sfdiskImage(t, small, applianceLayout)
	verify(t, img)
	// The image written to a larger disk: the backup GPT is in the middle.
	if err := os.Truncate(img, big); err != nil {
		t.Fatal(err)
	}
	e, grown, err := growFile(t, img, "rackd-data")
	if err != nil || !grown {
		t.Fatalf("Grow: grown %v, %v", grown, err)
	}
	verify(t, img)
	tab := readTable(t, img)
	// The backup entries take 32 sectors and its header one at the end.
	wantLast := int64(big/512) - 1 - 32 - 1
	if tab.PartitionTable.LastLBA != wantLast {
		t.Fatalf("last usable LBA %d, want %d", tab.PartitionTable.LastLBA, wantLast)
	}
	parts := tab.PartitionTable.Partitions
	if len(parts) != 5 {
		t.Fatalf("%d partitions after the grow, want 5: %+v", len(parts), parts)
	}
	d := parts[4]
	if d.Name != "rackd-data" || d.Start != 16384 || d.Start+d.Size-1 != wantLast || int64(e.Last) != wantLast {
		t.Fatalf("data partition %+v (entry %d..%d), want 16384..%d", d, e.First, e.Last, wantLast)
	}
	for i, p := range parts[:4] {
		if p.Size != 2048 && p.Size != 4096 {
			t.Fatalf("partition %d changed: %+v", i+1, p)
		}
	}
	// The old backup header, at the small image's last LBA, is gone.
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := make([]byte, 512)
	if _, err := f.ReadAt(old, small-512); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, make([]byte, 512)) {
		t.Fatal("the old backup header is still there")
	}

	// Again: nothing to do.
	if _, grown, err := growFile(t, img, "rackd-data"); err != nil || grown {
		t.Fatalf("second Grow: grown %v, %v", grown, err)
	}
	verify(t, img)
}

func TestGrowRefuses(t *testing.T) {
	notLast := strings.Replace(applianceLayout, `start=12288, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-b"`,
		`start=20480, size=4096, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="rackd-b"`, 1)
	twice := strings.Replace(applianceLayout, `name="rackd-b"`, `name="rackd-data"`, 1)
	for _, tc := range []struct {
		name, script, part, want string
	}{
		{"no such partition", applianceLayout, "rackd-c", `no partition is named "rackd-c"`},
		{"not the last partition", notLast, "rackd-data", "another partition ends after it"},
		{"two of that name", twice, "rackd-data", "two partitions are named"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := sfdiskImage(t, 16<<20, tc.script)
			before, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(img, 32<<20); err != nil {
				t.Fatal(err)
			}
			_, _, err = growFile(t, img, tc.part)
			var ge *Error
			if !errors.As(err, &ge) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Grow: %v, want a GPT error with %q", err, tc.want)
			}
			after, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after[:len(before)], before) {
				t.Fatal("a refused grow wrote to the disk")
			}
		})
	}
	t.Run("no table", func(t *testing.T) {
		if _, _, _, err := PlanGrow(make([]byte, 1<<20), 1<<20, "rackd-data"); err == nil {
			t.Fatal("PlanGrow of zeros succeeded")
		}
	})
}

// FuzzPlanGrow: whatever the disk's first MiB holds, PlanGrow returns an
// error or writes that stay on the disk and a partition inside it.
func FuzzPlanGrow(f *testing.F) {
	f.Add(make([]byte, 64<<10), int64(64<<20))
	if p, err := exec.LookPath("sfdisk"); err == nil {
		img := filepath.Join(f.TempDir(), "seed.img")
		if err := os.WriteFile(img, make([]byte, 12<<20), 0o644); err == nil {
			cmd := exec.Command(p, "--no-reread", "--no-tell-kernel", img)
			cmd.Stdin = strings.NewReader(applianceLayout)
			if cmd.Run() == nil {
				if b, err := os.ReadFile(img); err == nil {
					f.Add(b[:64<<10], int64(64<<20))
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, head []byte, diskSize int64) {
		if diskSize < int64(len(head)) || diskSize > 1<<40 {
			return
		}
		patches, e, grown, err := PlanGrow(head, diskSize, "rackd-data")
		if err != nil || !grown {
			if len(patches) != 0 {
				t.Fatal("writes planned for no grow")
			}
			return
		}
		for _, p := range patches {
			if p.Off < 0 || p.Off+int64(len(p.Data)) > diskSize {
				t.Fatalf("write of %d bytes at %d on a disk of %d", len(p.Data), p.Off, diskSize)
			}
		}
		if e.First > e.Last || int64(e.Last) >= diskSize/512 {
			t.Fatalf("grown entry %d..%d on a disk of %d bytes", e.First, e.Last, diskSize)
		}
	})
}
