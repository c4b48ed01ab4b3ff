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
