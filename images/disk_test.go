package images

import (
	"strconv"
	"strings"
	"testing"
)

// A raw disk image for deployment: role disk, only in deploy images, one
// per image, not empty.
func TestManifestDiskRole(t *testing.T) {
	sha := strings.Repeat("0", 64)
	file := func(path string, size int64) string {
		return `{"path":"` + path + `","role":"disk","sha256":"` + sha + `","size":` + strconv.FormatInt(size, 10) + `}`
	}
	for _, tc := range []struct {
		name, purpose, files, err string
	}{
		{"ok", "deploy", file("disk.img", 10), ""},
		{"with a kernel", "deploy", file("disk.img", 10) + `,{"path":"k","role":"kernel","sha256":"` + sha + `","size":1}`, ""},
		{"not deploy", "commission", file("disk.img", 10), "belongs to a deploy image"},
		{"two", "deploy", file("a.img", 10) + "," + file("b.img", 10), "second disk file"},
		{"empty", "deploy", file("disk.img", 0), "empty disk image"},
	} {
		_, err := ParseManifest([]byte(`{"name":"raw","arch":"amd64","purpose":"` + tc.purpose + `","files":[` + tc.files + `]}`))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// A disk file's format fields: only on disk files, known formats, sane
// sizes and digests; a file needs a sha256 or a sha512.
func TestManifestDiskFields(t *testing.T) {
	sha := strings.Repeat("0", 64)
	man := func(file string) string {
		return `{"name":"raw","arch":"amd64","purpose":"deploy","files":[` + file + `]}`
	}
	for _, tc := range []struct{ name, file, err string }{
		{"all", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"format":"xz","raw_size":5,"raw_sha256":"` + sha + `"}`, ""},
		{"qcow2", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"format":"qcow2"}`, ""},
		{"sha512 only", `{"path":"d","role":"disk","sha512":"` + strings.Repeat("0", 128) + `","size":1}`, ""},
		{"no digest", `{"path":"d","role":"disk","size":1}`, "no sha256 (or sha512)"},
		{"short sha512", `{"path":"d","role":"disk","sha512":"` + sha + `","size":1}`, "want 128 lowercase hex"},
		{"format", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"format":"vmdk"}`, "want raw, gzip, xz, zstd or qcow2"},
		{"raw size", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"raw_size":-1}`, "raw_size -1"},
		{"huge raw", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"raw_size":68719476737}`, "raw_size 68719476737"},
		{"raw sha", `{"path":"d","role":"disk","sha256":"` + sha + `","size":1,"raw_sha256":"x"}`, "raw_sha256"},
		{"on a kernel", `{"path":"k","role":"kernel","sha256":"` + sha + `","size":1,"format":"gzip"}`, "belong to a disk file, not a kernel"},
	} {
		_, err := ParseManifest([]byte(man(tc.file)))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
