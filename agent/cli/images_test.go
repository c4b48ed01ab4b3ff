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
	image2   = `{"name":"ubuntu-24.04","arch":"arm64","purpose":"deploy","cmdline":"console=ttyS0 --","files":[{"path":"root.tgz","role":"image","sha256":"` + imageSHA + `","size":5}]}`
)

const imagesTable = `NAME          ARCH   PURPOSE  FILES  SIZE  CREATED               CMDLINE
enlist        amd64  enlist   2      1024  2025-01-01T00:00:00Z  -
ubuntu-24.04  arm64  deploy   1      5     -                     console=ttyS0 --
`

// Import jobs as the API answers them: started, and done with image1.
const (
	jobRunning = `{"id":"i-1","source":"/srv/images/enlist","state":"running","bytes_done":0,"bytes_total":0,"files_done":0,"files":0,"by":"admin","started":"2025-01-01T00:00:00Z"}`
	jobDone    = `{"id":"i-1","source":"/srv/images/enlist","state":"done","bytes_done":1024,"bytes_total":1024,"files_done":2,"files":2,"by":"admin","started":"2025-01-01T00:00:00Z","finished":"2025-01-01T00:00:01Z","image":` + image1 + `}`
	jobFailed  = `{"id":"i-1","source":"http://h/img/rackd-image.json","state":"failed","bytes_done":12,"bytes_total":1024,"files_done":0,"files":2,"by":"admin","started":"2025-01-01T00:00:00Z","error":"images: import initrd.img: GET http://h/img/initrd.img: 404 Not Found"}`
)

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
			args: []string{"images", "import", "/srv/images/enlist"},
			routes: map[string]answer{
				"POST /api/v1/images/import":     {202, jobRunning},
				"GET /api/v1/images/imports/i-1": {200, jobDone},
			},
			want: []seen{
				{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/images/enlist","background":true}`},
				{Method: "GET", Path: "/api/v1/images/imports/i-1"},
			},
			contains: []string{"enlist  amd64  enlist   2      1024"},
			// Not a terminal: plain progress lines.
			errContains: []string{"import i-1: done 100% 1.0 KiB of 1.0 KiB"},
		},
		"images import --json prints the image": {
			args: []string{"images", "import", "--json", "/srv/images/enlist"},
			routes: map[string]answer{
				"POST /api/v1/images/import":     {202, jobRunning},
				"GET /api/v1/images/imports/i-1": {200, jobDone},
			},
			want: []seen{
				{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/images/enlist","background":true}`},
				{Method: "GET", Path: "/api/v1/images/imports/i-1"},
			},
			stdout:      indent(t, image1),
			errContains: []string{"import i-1: done 100%"},
		},
		"images import relative is made absolute": {
			args:        []string{"images", "import", "img/./enlist/"},
			routes:      map[string]answer{"POST /api/v1/images/import": {202, jobDone}},
			want:        []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":` + jsonString(t, rel) + `,"background":true}`}},
			errContains: []string{"import i-1: done 100% 1.0 KiB of 1.0 KiB, 0 B/s, file 2 of 2\n"},
		},
		"images import URL": {
			args:        []string{"images", "import", "https://images.example/noble/"},
			routes:      map[string]answer{"POST /api/v1/images/import": {202, jobDone}},
			want:        []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"url":"https://images.example/noble/","background":true}`}},
			errContains: []string{"import i-1: done"},
		},
		"images import URL fails": {
			args: []string{"images", "import", "http://h/img/"},
			routes: map[string]answer{
				"POST /api/v1/images/import":     {202, jobRunning},
				"GET /api/v1/images/imports/i-1": {200, jobFailed},
			},
			want: []seen{
				{Method: "POST", Path: "/api/v1/images/import", Body: `{"url":"http://h/img/","background":true}`},
				{Method: "GET", Path: "/api/v1/images/imports/i-1"},
			},
			code:        1,
			errContains: []string{"rackd: import i-1 failed: images: import initrd.img: GET http://h/img/initrd.img: 404 Not Found\n"},
		},
		"images import --detach": {
			args:     []string{"images", "import", "--detach", "/srv/images/enlist"},
			routes:   map[string]answer{"POST /api/v1/images/import": {202, jobRunning}},
			want:     []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/images/enlist","background":true}`}},
			contains: []string{"i-1  running  0%    0/0    0/0    /srv/images/enlist"},
		},
		"images import refused": {
			args: []string{"images", "import", "/srv/bad"},
			routes: map[string]answer{"POST /api/v1/images/import": {400,
				`{"error":"images: import: open /srv/bad: no such file or directory","code":"bad_request"}`}},
			want:        []seen{{Method: "POST", Path: "/api/v1/images/import", Body: `{"dir":"/srv/bad","background":true}`}},
			code:        1,
			errContains: []string{"rackd: images: import: open /srv/bad: no such file or directory (bad_request, HTTP 400)\n"},
		},
		"images imports": {
			args:     []string{"images", "imports"},
			routes:   map[string]answer{"GET /api/v1/images/imports": {200, "[" + jobDone + "," + jobFailed + "]"}},
			want:     []seen{{Method: "GET", Path: "/api/v1/images/imports"}},
			contains: []string{"i-1  done    100%  1024/1024  2/2", "i-1  failed  1%    12/1024    0/2    http://h/img/rackd-image.json"},
		},
		"images imports ID": {
			args:     []string{"images", "imports", "i-1"},
			routes:   map[string]answer{"GET /api/v1/images/imports/i-1": {200, jobDone}},
			want:     []seen{{Method: "GET", Path: "/api/v1/images/imports/i-1"}},
			contains: []string{"i-1  done   100%  1024/1024  2/2    /srv/images/enlist"},
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
		"help lists the verbs": {args: []string{"help"}, stdout: []string{"images list", "images import DIR|URL", "images imports [ID]", "images rm NAME ARCH"}},
		"import -h says the server reads DIR": {args: []string{"images", "import", "-h"},
			stdout: []string{"Usage: rackd images import DIR|URL [--detach]", "on the rackd host", "progress bar"}},
		"import without DIR":       {args: []string{"images", "import"}, code: 2, errContains: []string{"rackd images import: missing DIR|URL\n"}},
		"import of another scheme": {args: []string{"images", "import", "ftp://h/x"}, code: 2, errContains: []string{"want a directory or an http:// or https:// URL"}},
		"rm without ARCH":          {args: []string{"images", "rm", "enlist"}, code: 2, errContains: []string{"rackd images rm: missing ARCH\n"}},
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
