package images

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type imgFile struct {
	path, role string
	data       []byte
	sha        string // override
	size       int64  // override if >0
	// The disk fields of the manifest entry (none when empty).
	format, rawSHA string
	rawSize        int64
}

func writeImage(t *testing.T, files []imgFile) string {
	t.Helper()
	dir := t.TempDir()
	var m Manifest
	m.Name, m.Arch, m.Purpose = "noble", "amd64", PurposeDeploy
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		mf := File{Path: f.path, Role: f.role, SHA256: sum(f.data), Size: int64(len(f.data)),
			Format: f.format, RawSize: f.rawSize, RawSHA256: f.rawSHA}
		if f.sha != "" {
			mf.SHA256 = f.sha
		}
		if f.size > 0 {
			mf.Size = f.size
		}
		m.Files = append(m.Files, mf)
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImportDir(t *testing.T) {
	kernel, initrd := []byte("kernel bytes"), []byte("initrd bytes")
	wrong := sum([]byte("nope"))
	tests := []struct {
		name    string
		files   []imgFile
		wantErr string
	}{
		{"happy", []imgFile{{path: "boot/vmlinuz", role: RoleKernel, data: kernel}, {path: "boot/initrd", role: RoleInitrd, data: initrd}}, ""},
		{"wrong checksum", []imgFile{{path: "vmlinuz", role: RoleKernel, data: kernel}, {path: "initrd", role: RoleInitrd, data: initrd, sha: wrong}}, "expected " + wrong},
		{"wrong size", []imgFile{{path: "vmlinuz", role: RoleKernel, data: kernel}, {path: "initrd", role: RoleInitrd, data: initrd, size: 999}}, "expected 999 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			img := writeImage(t, tc.files)
			var calls int
			var last Progress
			m, blobs, err := ImportDir(context.Background(), s, img, ImportOptions{Progress: func(p Progress) { calls++; last = p }})
			if tc.wantErr != "" {
				var ie *ImportError
				if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v", err)
				}
				if len(ie.Removed) != 1 || ie.Removed[0] != sum(kernel) {
					t.Fatalf("Removed = %v", ie.Removed)
				}
				assertEmpty(t, sdir)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Name != "noble" || len(blobs) != len(tc.files) || calls == 0 {
				t.Fatalf("m=%+v blobs=%+v calls=%d", m, blobs, calls)
			}
			if want := int64(len(kernel) + len(initrd)); last.Done != want || last.Total != want || last.FilesDone != 2 || last.Files != 2 {
				t.Fatalf("last progress %+v, want %d of %d bytes and 2 of 2 files", last, want, want)
			}
			for i, f := range tc.files {
				if blobs[i] != (Blob{sum(f.data), int64(len(f.data))}) || !s.Has(blobs[i].SHA256) {
					t.Fatalf("blob %d = %+v", i, blobs[i])
				}
			}
			if err := s.Remove(blobs[0].SHA256); err != nil {
				t.Fatalf("blob pinned after import: %v", err)
			}
		})
	}
}

func TestImportRollbackKeepsShared(t *testing.T) {
	s, sdir := mustOpen(t)
	shared, kernel := []byte("shared bootloader"), []byte("kernel")
	pre, err := s.Add(context.Background(), strings.NewReader(string(shared)), "", -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	img := writeImage(t, []imgFile{
		{path: "pxelinux.0", role: RoleBootloader, data: shared},
		{path: "vmlinuz", role: RoleKernel, data: kernel},
		{path: "initrd", role: RoleInitrd, data: []byte("x"), sha: sum([]byte("y"))},
	})
	inUse := func(h string) bool { return h == sum(kernel) } // pretend another image uses it
	_, _, err = ImportDir(context.Background(), s, img, ImportOptions{InUse: inUse})
	var ie *ImportError
	if !errors.As(err, &ie) || len(ie.Removed) != 0 || len(ie.Kept) != 1 || ie.Kept[0] != sum(kernel) {
		t.Fatalf("err = %v %+v", err, ie)
	}
	if !s.Has(pre.SHA256) || !s.Has(sum(kernel)) {
		t.Fatal("pre-existing or in-use blob removed")
	}
	if n := dirNames(t, filepath.Join(sdir, "tmp")); len(n) != 0 {
		t.Fatalf("tmp left: %v", n)
	}
}

func TestImportSymlinkEscape(t *testing.T) {
	s, sdir := mustOpen(t)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := writeImage(t, []imgFile{{path: "vmlinuz", role: RoleKernel, data: []byte("secret")}})
	os.Remove(filepath.Join(img, "vmlinuz"))
	if err := os.Symlink(outside, filepath.Join(img, "vmlinuz")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ImportDir(context.Background(), s, img, ImportOptions{}); err == nil {
		t.Fatal("symlink escape accepted")
	}
	assertEmpty(t, sdir)
}

func TestImportCancelled(t *testing.T) {
	s, sdir := mustOpen(t)
	img := writeImage(t, []imgFile{{path: "vmlinuz", role: RoleKernel, data: []byte("k")}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ImportDir(ctx, s, img, ImportOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	assertEmpty(t, sdir)
}

const goodSHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestParseManifest(t *testing.T) {
	file := func(path, role, sha string) string {
		return `{"path":"` + path + `","role":"` + role + `","sha256":"` + sha + `","size":0}`
	}
	man := func(purpose string, files ...string) string {
		return `{"name":"noble","arch":"amd64","purpose":"` + purpose + `","files":[` + strings.Join(files, ",") + `]}`
	}
	cmd := func(c string) string {
		return `{"name":"noble","arch":"amd64","purpose":"deploy","cmdline":"` + c + `","files":[` + file("k", "kernel", goodSHA) + `]}`
	}
	tests := []struct {
		name, in, wantErr string
	}{
		{"ok", man("deploy", file("boot/vmlinuz", "kernel", goodSHA)), ""},
		{"ok enlist", man("enlist", file("initrd", "initrd", goodSHA), file("x.efi", "bootloader", goodSHA)), ""},
		{"unknown field", `{"name":"n","arch":"a","purpose":"deploy","extra":1,"files":[` + file("k", "kernel", goodSHA) + `]}`, "unknown field"},
		{"unknown file field", man("deploy", `{"path":"k","role":"kernel","sha256":"`+goodSHA+`","size":0,"mode":7}`), "unknown field"},
		{"dotdot", man("deploy", file("../x", "kernel", goodSHA)), `".."`},
		{"inner dotdot", man("deploy", file("a/../../x", "kernel", goodSHA)), `".."`},
		{"absolute", man("deploy", file("/etc/passwd", "kernel", goodSHA)), "absolute"},
		{"unclean", man("deploy", file("a//b", "kernel", goodSHA)), "not clean"},
		{"dot", man("deploy", file(".", "kernel", goodSHA)), "not clean"},
		{"bad purpose", man("install", file("k", "kernel", goodSHA)), "purpose"},
		{"bad role", man("deploy", file("k", "rootfs", goodSHA)), "role"},
		{"upper sha", man("deploy", file("k", "kernel", strings.ToUpper(goodSHA))), "sha256"},
		{"short sha", man("deploy", file("k", "kernel", goodSHA[:10])), "sha256"},
		{"no files", man("deploy"), "no files"},
		{"dup path", man("deploy", file("k", "kernel", goodSHA), file("k", "initrd", goodSHA)), "duplicate"},
		{"bad name", `{"name":"../x","arch":"amd64","purpose":"deploy","files":[` + file("k", "kernel", goodSHA) + `]}`, "name"},
		{"trailing", man("deploy", file("k", "kernel", goodSHA)) + "{}", "trailing"},
		{"negative size", man("deploy", `{"path":"k","role":"kernel","sha256":"`+goodSHA+`","size":-1}`), "size -1"},
		{"huge size", man("deploy", `{"path":"k","role":"kernel","sha256":"`+goodSHA+`","size":68719476737}`), "size 68719476737"},
		{"bootloader", man("bootloader", file("pxelinux.0", "bootloader", goodSHA)), ""},
		{"os and series", `{"name":"n","arch":"amd64","purpose":"deploy","os":"ubuntu","series":"noble","files":[` + file("k", "kernel", goodSHA) + `]}`, ""},
		{"bad series", `{"name":"n","arch":"amd64","purpose":"deploy","os":"ubuntu","series":"No ble","files":[` + file("k", "kernel", goodSHA) + `]}`, "series"},
		{"os of a commission image", `{"name":"n","arch":"amd64","purpose":"commission","os":"ubuntu","files":[` + file("k", "kernel", goodSHA) + `]}`, "deploy image"},
		{"cmdline", cmd("console=ttyS0,115200n8 quiet  ip=dhcp"), ""},
		{"cmdline newline", cmd(`quiet\nro`), "not allowed"},
		{"cmdline tab", cmd(`quiet\tro`), "not allowed"},
		{"cmdline quote", cmd(`a=\"b c\"`), "not allowed"},
		{"cmdline dollar", cmd(`a=$x`), "not allowed"},
		{"cmdline semicolon", cmd(`a;reboot`), "not allowed"},
		{"cmdline rackd", cmd(`quiet rackd.url=http://evil`), "reserved"},
		{"cmdline initrd", cmd(`initrd=x`), "reserved"},
		{"cmdline long", cmd(strings.Repeat("a", MaxCmdline+1)), "at most"},
		{"not json", "nope", "manifest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil || m == nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestImportMalformedManifest(t *testing.T) {
	s, sdir := mustOpen(t)
	img := t.TempDir()
	os.WriteFile(filepath.Join(img, "k"), nil, 0o644)
	os.WriteFile(filepath.Join(img, ManifestName), []byte(`{"name":"n","arch":"a","purpose":"deploy","files":[{"path":"../k","role":"kernel","sha256":"`+goodSHA+`","size":0}]}`), 0o644)
	if _, _, err := ImportDir(context.Background(), s, img, ImportOptions{}); err == nil {
		t.Fatal("accepted")
	}
	assertEmpty(t, sdir)
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"name":"noble","arch":"amd64","purpose":"deploy","files":[{"path":"boot/vmlinuz","role":"kernel","sha256":"` + goodSHA + `","size":0}]}`))
	f.Add([]byte(`{"name":"n","arch":"a","purpose":"enlist","files":[{"path":"../x","role":"initrd","sha256":"","size":-1}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"name":"d","arch":"amd64","purpose":"deploy","files":[{"path":"d.zst","role":"disk","sha512":"` + strings.Repeat("ab", 64) +
		`","size":5,"format":"zstd","raw_size":9,"raw_sha256":"` + goodSHA + `"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed manifest fails Validate: %v", err)
		}
		for _, fl := range m.Files {
			if filepath.IsAbs(fl.Path) || !filepath.IsLocal(fl.Path) || !ValidHex(fl.SHA256) && !validHexLen(fl.SHA512, 128) {
				t.Fatalf("unsafe file accepted: %+v", fl)
			}
			if fl.Role != RoleDisk && (fl.Format != "" || fl.RawSize != 0 || fl.RawSHA256 != "") {
				t.Fatalf("disk fields on a %s file: %+v", fl.Role, fl)
			}
		}
	})
}
