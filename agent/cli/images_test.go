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

	image3 = `{"name":"noble","arch":"amd64","purpose":"deploy","files":[{"path":"noble.img.zst","role":"disk","sha256":"` + imageSHA + `","size":300,"format":"zstd","raw_size":2147483648,"raw_sha256":"` + imageSHA + `"}]}`
)

const imagesTable = `NAME          ARCH   PURPOSE  FILES  SIZE  DISK             CREATED               CMDLINE
enlist        amd64  enlist   2      1024  -                2025-01-01T00:00:00Z  -
ubuntu-24.04  arm64  deploy   1      5     -                -                     console=ttyS0 --
noble         amd64  deploy   1      300   zstd:2147483648  -                     -
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
			routes: map[string]answer{"GET /api/v1/images": {200, "[" + image1 + "," + image2 + "," + image3 + "]"}},
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
		"images import a cloud image by sha256": {
			args:   []string{"images", "import", "https://cloud.example/noble.img", "--sha256", imageSHA, "--name", "noble", "--arch", "arm64"},
			routes: map[string]answer{"POST /api/v1/images/import": {202, jobDone}},
			want: []seen{{Method: "POST", Path: "/api/v1/images/import",
				Body: `{"url":"https://cloud.example/noble.img","sha256":"` + imageSHA + `","name":"noble","arch":"arm64","background":true}`}},
			contains:    []string{"enlist"},
			errContains: []string{"import i-1: done"},
		},
		"images import a cloud image by checksums": {
			args:   []string{"images", "import", "--checksums", "https://cloud.example/SHA512SUMS", "https://cloud.example/debian.qcow2"},
			routes: map[string]answer{"POST /api/v1/images/import": {202, jobDone}},
			want: []seen{{Method: "POST", Path: "/api/v1/images/import",
				Body: `{"url":"https://cloud.example/debian.qcow2","checksums":"https://cloud.example/SHA512SUMS","background":true}`}},
			contains:    []string{"enlist"},
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
			stdout: []string{"Usage: rackd images import DIR|URL [--sha256 HEX | --checksums URL] [--name N] [--arch A] [--os OS --series S] [--detach]", "on the rackd host", "progress bar", "SHA512SUMS", "qemu-img"}},
		"import with both digests":    {args: []string{"images", "import", "--sha256", "x", "--checksums", "http://h/S", "http://h/x.img"}, code: 2, errContains: []string{"--sha256 and --checksums: give one"}},
		"import of a cloud image dir": {args: []string{"images", "import", "--sha256", "x", "/srv/x"}, code: 2, errContains: []string{"a cloud image is imported from an http:// or https:// URL"}},
		"import with a name only":     {args: []string{"images", "import", "--name", "x", "http://h/x.img"}, code: 2, errContains: []string{"--name and --arch name a cloud image"}},
		"import without DIR":          {args: []string{"images", "import"}, code: 2, errContains: []string{"rackd images import: missing DIR|URL\n"}},
		"import of another scheme":    {args: []string{"images", "import", "ftp://h/x"}, code: 2, errContains: []string{"want a directory or an http:// or https:// URL"}},
		"rm without ARCH":             {args: []string{"images", "rm", "enlist"}, code: 2, errContains: []string{"rackd images rm: missing ARCH\n"}},
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
