package images

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// imageServer serves dir over real HTTP (httptest listens on loopback),
// letting hook take over the answer for a path first.
func imageServer(t *testing.T, dir string, hook func(w http.ResponseWriter, r *http.Request) bool) *httptest.Server {
	t.Helper()
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook != nil && hook(w, r) {
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func importURL(ctx context.Context, t *testing.T, s *Store, raw string, opts ImportOptions, uopts URLOptions) (*Imported, error) {
	t.Helper()
	src, err := OpenURL(raw, uopts)
	if err != nil {
		t.Fatalf("OpenURL(%q): %v", raw, err)
	}
	defer src.Close()
	return Import(ctx, s, src, opts)
}

func TestImportURL(t *testing.T) {
	kernel := []byte(strings.Repeat("kernel ", 100000)) // 700 kB: several reads
	initrd := []byte("initrd bytes")
	odd := []byte("a file whose name needs escaping")
	img := writeImage(t, []imgFile{
		{path: "boot/vmlinuz", role: RoleKernel, data: kernel},
		{path: "initrd", role: RoleInitrd, data: initrd},
		{path: "odd/a b#c?.img", role: RoleImage, data: odd},
	})
	srv := imageServer(t, img, nil)
	for _, u := range []string{srv.URL + "/", srv.URL, srv.URL + "/" + ManifestName} {
		t.Run(u, func(t *testing.T) {
			s, _ := mustOpen(t)
			var mu sync.Mutex
			var seen []Progress
			im, err := importURL(context.Background(), t, s, u, ImportOptions{Progress: func(p Progress) {
				mu.Lock()
				seen = append(seen, p)
				mu.Unlock()
			}}, URLOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Release()
			for i, d := range [][]byte{kernel, initrd, odd} {
				if im.Blobs[i] != (Blob{sum(d), int64(len(d))}) || !s.Has(sum(d)) {
					t.Fatalf("blob %d = %+v", i, im.Blobs[i])
				}
			}
			// Pinned until Release: a concurrent delete cannot take
			// a blob the caller is about to record.
			if err := s.Remove(im.Blobs[0].SHA256); !errors.Is(err, ErrInUse) {
				t.Fatalf("Remove before Release: %v, want ErrInUse", err)
			}
			total := int64(len(kernel) + len(initrd) + len(odd))
			var prev int64
			for _, p := range seen {
				if p.Total != total || p.Done < prev || p.Done > total || p.Files != 3 {
					t.Fatalf("progress %+v after %d (total %d)", p, prev, total)
				}
				prev = p.Done
			}
			if last := seen[len(seen)-1]; last.Done != total || last.FilesDone != 3 || len(seen) < 5 {
				t.Fatalf("%d progress calls, last %+v", len(seen), last)
			}
			im.Release()
			im.Release() // idempotent
			if err := s.Remove(im.Blobs[0].SHA256); err != nil {
				t.Fatalf("Remove after Release: %v", err)
			}
		})
	}
}

// Every way a URL import can fail leaves the store as it was: no blob of
// the image, nothing in tmp/.
func TestImportURLFailuresLeaveNothing(t *testing.T) {
	kernel := []byte(strings.Repeat("K", 300000))
	initrd := []byte(strings.Repeat("I", 300000))
	good := []imgFile{{path: "vmlinuz", role: RoleKernel, data: kernel}, {path: "initrd", role: RoleInitrd, data: initrd}}

	// truncate sends the headers of the whole initrd and half its bytes,
	// then drops the connection.
	truncate := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/initrd" {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(initrd)))
		w.WriteHeader(200)
		w.Write(initrd[:len(initrd)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // closes the connection
	}
	notFound := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/initrd" {
			http.Error(w, "gone", http.StatusNotFound)
			return true
		}
		return false
	}
	serverError := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/initrd" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return true
		}
		return false
	}
	// longer says the initrd is longer than the manifest does.
	longer := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/initrd" {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(initrd)+1))
		w.WriteHeader(200)
		w.Write(append(initrd, 'x'))
		return true
	}
	// chunkedLonger sends more bytes than the manifest lists, without a
	// Content-Length, so only the store's size check can catch it.
	chunkedLonger := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/initrd" {
			return false
		}
		w.WriteHeader(200)
		w.Write(initrd)
		w.(http.Flusher).Flush()
		w.Write([]byte("more"))
		return true
	}
	bigManifest := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/"+ManifestName {
			return false
		}
		w.Write([]byte(`{"name":"` + strings.Repeat("x", MaxManifestSize) + `"}`))
		return true
	}
	tests := []struct {
		name    string
		files   []imgFile
		hook    func(http.ResponseWriter, *http.Request) bool
		wantErr string
	}{
		{"wrong checksum", []imgFile{good[0], {path: "initrd", role: RoleInitrd, data: initrd, sha: sum([]byte("other"))}}, nil, "sha256 mismatch"},
		{"wrong size", []imgFile{good[0], {path: "initrd", role: RoleInitrd, data: initrd, size: 5}}, nil, "manifest says 5"},
		{"truncated", good, truncate, "truncated download"},
		{"404", good, notFound, "404 Not Found"},
		{"500", good, serverError, "500 Internal Server Error"},
		{"content-length", good, longer, "the server sends 300001 bytes, the manifest says 300000"},
		{"too long", good, chunkedLonger, "size mismatch"},
		{"manifest too big", good, bigManifest, "manifest larger than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, sdir := mustOpen(t)
			srv := imageServer(t, writeImage(t, tc.files), tc.hook)
			_, err := importURL(context.Background(), t, s, srv.URL+"/", ImportOptions{}, URLOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			assertEmpty(t, sdir)
		})
	}
}

// blockingServer sends half of the initrd, then holds the connection open
// until the request ends or the test does, so the import is mid-file.
func blockingServer(t *testing.T, img string, initrd []byte) *httptest.Server {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	srv := imageServer(t, img, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/initrd" {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(initrd)))
		w.WriteHeader(200)
		w.Write(initrd[:len(initrd)/2])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		case <-time.After(30 * time.Second):
		}
		return true
	})
	// Close the blocked handler before the server waits for it.
	t.Cleanup(srv.CloseClientConnections)
	return srv
}

func TestImportURLCancelled(t *testing.T) {
	kernel, initrd := []byte("kernel"), []byte(strings.Repeat("I", 200000))
	img := writeImage(t, []imgFile{{path: "vmlinuz", role: RoleKernel, data: kernel}, {path: "initrd", role: RoleInitrd, data: initrd}})
	srv := blockingServer(t, img, initrd)
	s, sdir := mustOpen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := importURL(ctx, t, s, srv.URL, ImportOptions{Progress: func(p Progress) {
		// Cancel once the initrd is partly written to tmp/.
		if p.Path == "initrd" && p.Done > int64(len(kernel)) {
			if n := dirNames(t, filepath.Join(sdir, "tmp")); len(n) != 1 {
				t.Errorf("mid-download tmp/ holds %v, want one file", n)
			}
			cancel()
		}
	}}, URLOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertEmpty(t, sdir)
}

func TestImportURLStalled(t *testing.T) {
	kernel, initrd := []byte("kernel"), []byte(strings.Repeat("I", 200000))
	img := writeImage(t, []imgFile{{path: "vmlinuz", role: RoleKernel, data: kernel}, {path: "initrd", role: RoleInitrd, data: initrd}})
	srv := blockingServer(t, img, initrd)
	s, sdir := mustOpen(t)
	_, err := importURL(context.Background(), t, s, srv.URL, ImportOptions{}, URLOptions{StallTimeout: 300 * time.Millisecond})
	if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "no data for 300ms") {
		t.Fatalf("err = %v, want a stall", err)
	}
	assertEmpty(t, sdir)
}

func TestOpenURLRefuses(t *testing.T) {
	for _, u := range []string{"ftp://h/x", "file:///etc", "/abs/dir", "http://", "http://h/x#frag", "://bad"} {
		if _, err := OpenURL(u, URLOptions{}); err == nil {
			t.Errorf("OpenURL(%q) accepted", u)
		}
	}
	src, err := OpenURL("https://h:8443/img/noble", URLOptions{})
	if err != nil || src.String() != "https://h:8443/img/noble/"+ManifestName {
		t.Fatalf("OpenURL: %v %v", src, err)
	}
}

// A manifest Check refusal stops the import before any file is fetched.
func TestImportCheck(t *testing.T) {
	img := writeImage(t, []imgFile{{path: "vmlinuz", role: RoleKernel, data: []byte("k")}})
	var fetched int
	srv := imageServer(t, img, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/vmlinuz" {
			fetched++
		}
		return false
	})
	s, sdir := mustOpen(t)
	_, err := importURL(context.Background(), t, s, srv.URL, ImportOptions{Check: func(*Manifest) error { return errors.New("no thanks") }}, URLOptions{})
	if err == nil || !strings.Contains(err.Error(), "no thanks") || fetched != 0 {
		t.Fatalf("err = %v, %d fetches", err, fetched)
	}
	assertEmpty(t, sdir)
	if _, err := os.Stat(filepath.Join(sdir, "sha256")); err != nil {
		t.Fatal(err)
	}
}

// A manifest path, however odd, resolves to a URL on the manifest's server
// inside the manifest's directory, and the server receives the name as
// written: '?', '#', '%' and spaces are escaped, never interpreted.
func FuzzFileURL(f *testing.F) {
	f.Add("https://h/img/", "boot/vmlinuz")
	f.Add("http://h:8080/a/b/rackd-image.json", "a b#c?.img")
	f.Add("http://h/", "%2e%2e/x")
	f.Add("http://h/a/../b", "x;y=1")
	f.Add("http://[::1]:80/x/", "//y")
	f.Fuzz(func(t *testing.T, base, p string) {
		if checkPath(p) != nil {
			return
		}
		src, err := OpenURL(base, URLOptions{})
		if err != nil {
			return
		}
		u := src.(*urlSource)
		got := u.fileURL(p)
		if got.Scheme != u.manifest.Scheme || got.Host != u.manifest.Host || got.User.String() != u.manifest.User.String() {
			t.Fatalf("%q against %q left the server: %s", p, u.manifest, got)
		}
		want := path.Join(path.Dir(path.Clean("/"+u.manifest.Path)), p)
		back, err := url.Parse(got.String())
		if err != nil {
			t.Fatalf("%q: %s does not parse: %v", p, got, err)
		}
		if back.Path != want || back.RawQuery != "" || back.Fragment != "" {
			t.Fatalf("%q against %q: the server would see path %q query %q fragment %q, want path %q",
				p, u.manifest, back.Path, back.RawQuery, back.Fragment, want)
		}
	})
}
