package bootconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The phase environments: a deploy image that is a raw disk image,
// written by the commissioning environment in deploy mode, and the erase
// mode of a release.
func TestPhaseModes(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	comm := Environment{Kernel: "images/k", Initrds: []string{"images/i"}, Args: []string{"console=ttyS0"}}
	disk := comm
	disk.Disk = &DiskImage{Path: "images/" + sha, SHA256: sha, Size: 1 << 20}
	src := &fakeSource{
		machines: map[string]MachineInfo{
			"52:54:00:00:09:01": {ID: "m-dep", State: "DEPLOYING", Image: "raw"},
			"52:54:00:00:09:02": {ID: "m-era", State: "RELEASING", Erase: true},
			"52:54:00:00:09:03": {ID: "m-rel", State: "RELEASING"},
			"52:54:00:00:09:04": {ID: "m-dd", State: "DEPLOYED", Image: "raw"},
			"52:54:00:00:09:05": {ID: "m-com", State: "COMMISSIONING"},
		},
		envs: map[string]Environments{"amd64": {Commission: comm, Deploy: map[string]Environment{"raw": disk}}},
	}
	for _, tc := range []struct {
		mac  string
		want []string // substrings of the iPXE script
		not  []string
	}{
		{"52:54:00:00:09:01", []string{"rackd.mode=deploy rackd.machine=m-dep rackd.image=images/" + sha +
			" rackd.image_sha256=" + sha + " rackd.image_size=1048576 console=ttyS0"}, nil},
		{"52:54:00:00:09:02", []string{"rackd.mode=erase rackd.machine=m-era console=ttyS0"}, []string{"rackd.image"}},
		{"52:54:00:00:09:03", []string{"from local disk", "exit"}, []string{"kernel"}},
		{"52:54:00:00:09:04", []string{"from local disk", "exit"}, []string{"kernel", "rackd.image"}},
		{"52:54:00:00:09:05", []string{"rackd.mode=commission rackd.machine=m-com console=ttyS0"}, []string{"rackd.image"}},
	} {
		out, err := Render(context.Background(), src, Request{Kind: IPXEMAC, MAC: tc.mac}, Bases{HTTP: "http://10.0.0.1:5240"})
		if err != nil {
			t.Fatalf("%s: %v", tc.mac, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: config lacks %q:\n%s", tc.mac, w, out)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(string(out), w) {
				t.Errorf("%s: config has %q:\n%s", tc.mac, w, out)
			}
		}
	}
	// Erase without a commissioning environment: local disk, with a message.
	d := Decide(MachineInfo{ID: "m", State: "RELEASING", Erase: true}, true, Environments{})
	if d.Mode != ModeErase || d.Boots() || !strings.Contains(d.Missing, "erase") {
		t.Fatalf("%+v", d)
	}
}

func TestDiskImageChecked(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	for name, im := range map[string]DiskImage{
		"bad path": {Path: "../etc/passwd", SHA256: sha, Size: 1},
		"bad sha":  {Path: "images/x", SHA256: "AB" + sha[2:], Size: 1},
		"short":    {Path: "images/x", SHA256: sha[:10], Size: 1},
		"size":     {Path: "images/x", SHA256: sha, Size: 0},
		"format":   {Path: "images/x", SHA256: sha, Size: 1, Format: "bzip2", RawSize: 2},
		"raw size": {Path: "images/x", SHA256: sha, Size: 1, Format: FormatXZ},
		"raw sha":  {Path: "images/x", SHA256: sha, Size: 1, Format: FormatGzip, RawSize: 2, RawSHA256: "x"},
		"chunks":   {Path: "images/x", SHA256: sha, Size: 1, Chunks: "AB" + sha[2:]},
	} {
		env := Environment{Kernel: "images/k", Disk: &im}
		src := &fakeSource{machines: map[string]MachineInfo{"52:54:00:00:09:01": {ID: "m", State: "DEPLOYING", Image: "raw"}},
			envs: map[string]Environments{"amd64": {Deploy: map[string]Environment{"raw": env}}}}
		_, err := Render(context.Background(), src, Request{Kind: IPXEMAC, MAC: "52:54:00:00:09:01"}, Bases{HTTP: "http://10.0.0.1:5240"})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// A compressed disk image adds its format and raw size (and raw sha256
// when known) after the served file's arguments; a raw one adds nothing, so
// an environment that predates compressed images reads it as before.
func TestDiskImageArgs(t *testing.T) {
	sha, raw := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	base := "rackd.image=images/" + sha + " rackd.image_sha256=" + sha + " rackd.image_size=100"
	for name, tc := range map[string]struct {
		im   DiskImage
		want string
	}{
		"raw":           {DiskImage{Format: FormatRaw, RawSize: 100, RawSHA256: sha}, base},
		"old record":    {DiskImage{}, base},
		"zstd":          {DiskImage{Format: FormatZstd, RawSize: 1 << 30, RawSHA256: raw}, base + " rackd.image_format=zstd rackd.image_raw_size=1073741824 rackd.image_raw_sha256=" + raw},
		"xz no raw sha": {DiskImage{Format: FormatXZ, RawSize: 4096}, base + " rackd.image_format=xz rackd.image_raw_size=4096"},
		"gzip":          {DiskImage{Format: FormatGzip, RawSize: 7, RawSHA256: raw}, base + " rackd.image_format=gzip rackd.image_raw_size=7 rackd.image_raw_sha256=" + raw},
		"raw, chunks":   {DiskImage{Format: FormatRaw, Chunks: raw}, base + " rackd.image_chunks=" + raw},
		"zstd, chunks": {DiskImage{Format: FormatZstd, RawSize: 7, RawSHA256: raw, Chunks: sha},
			base + " rackd.image_format=zstd rackd.image_raw_size=7 rackd.image_raw_sha256=" + raw + " rackd.image_chunks=" + sha},
	} {
		im := tc.im
		im.Path, im.SHA256, im.Size = "images/"+sha, sha, 100
		d := Decision{Mode: ModeDeploy, Env: Environment{Kernel: "images/k", Disk: &im, Args: []string{"quiet"}}}
		got := strings.Join(d.Cmdline("http://h"), " ")
		if want := "rackd.url=http://h rackd.mode=deploy " + tc.want + " quiet"; got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}
