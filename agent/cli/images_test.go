package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

const (
	imageSHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	image1   = `{"name":"enlist","arch":"amd64","purpose":"enlist","files":[{"path":"vmlinuz","role":"kernel","sha256":"` + imageSHA + `","size":1000},{"path":"initrd.img","role":"initrd","sha256":"` + imageSHA + `","size":24}],"created":"2025-01-01T00:00:00Z","future":1}`
	image2   = `{"name":"ubuntu-24.04","arch":"arm64","purpose":"deploy","files":[{"path":"root.tgz","role":"image","sha256":"` + imageSHA + `","size":5}]}`
)

const imagesTable = `NAME          ARCH   PURPOSE  FILES  SIZE  CREATED
enlist        amd64  enlist   2      1024  2025-01-01T00:00:00Z
ubuntu-24.04  arm64  deploy   1      5     -
`

func TestImagesVerbs(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join(wd, "img", "enlist")
	runVerbCases(t, map[string]verbCase{
		"images list": {
			args:   []string{"images", "list"},
			routes: map[string]answer{"GET /api/v1/images": {200, "[" + image1 + "," + image2 + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/images"}},
			stdout: imagesTable,
		},
		"images list --json keeps unknown fields": {
			args:   []string{"images", "list", "--json"},
			routes: map[string]answer{"GET /api/v1/images": {200, "[" + image1 + "]"}},
			want:   []seen{{Method: "GET", Path: "/api/v1/images"}},
			stdout: indent(t, "["+image1+"]"),
		},
		"images import absolute": {
			args:     []string{"images", "import", "/srv/images/enlist"},
			routes:   map[string]answer{"POST /api/v1/images/import": {201, image1}},
			want:     []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/images/enlist"}`}},
			contains: []string{"enlist  amd64  enlist   2      1024"},
		},
		"images import relative is made absolute": {
			args:   []string{"images", "import", "img/./enlist/"},
			routes: map[string]answer{"POST /api/v1/images/import": {201, image1}},
			want:   []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":` + jsonString(t, rel) + `}`}},
		},
		"images import refused": {
			args: []string{"images", "import", "/srv/bad"},
			routes: map[string]answer{"POST /api/v1/images/import": {400,
				`{"error":"images: import initrd.img: images: sha256 mismatch: expected a, got b","code":"bad_request"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/bad"}`}},
			code:        1,
			errContains: []string{"rackd: images: import initrd.img: images: sha256 mismatch: expected a, got b (bad_request, HTTP 400)\n"},
		},
		"images rm": {
			args:     []string{"images", "rm", "ubuntu-24.04", "arm64"},
			routes:   map[string]answer{"DELETE /api/v1/images/ubuntu-24.04/arm64": {200, image2}},
			want:     []seen{{Method: "DELETE", Path: "/api/v1/images/ubuntu-24.04/arm64"}},
			contains: []string{"ubuntu-24.04  arm64  deploy"},
		},
		"images rm unknown": {
			args:        []string{"images", "rm", "nosuch", "amd64"},
			routes:      map[string]answer{"DELETE /api/v1/images/nosuch/amd64": {404, `{"error":"no image nosuch/amd64","code":"not_found"}`}},
			want:        []seen{{Method: "DELETE", Path: "/api/v1/images/nosuch/amd64"}},
			code:        1,
			errContains: []string{"rackd: no image nosuch/amd64 (not_found, HTTP 404)\n"},
		},
	})
}

func TestImagesUsage(t *testing.T) {
	runUsageCases(t, map[string]usageCase{
		"help lists the verbs": {args: []string{"help"}, stdout: []string{"images list", "images import DIR", "images rm NAME ARCH"}},
		"import -h says the server reads DIR": {args: []string{"images", "import", "-h"},
			stdout: []string{"Usage: rackd images import DIR", "on the rackd host"}},
		"import without DIR": {args: []string{"images", "import"}, code: 2, errContains: []string{"rackd images import: missing DIR\n"}},
		"rm without ARCH":    {args: []string{"images", "rm", "enlist"}, code: 2, errContains: []string{"rackd images rm: missing ARCH\n"}},
	})
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
