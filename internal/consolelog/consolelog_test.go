package consolelog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// dirBytes is what a machine's directory holds on disk, in output files.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			st, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			n += st.Size()
		}
	}
	return n
}

// TestBootBounds writes a boot in chunks of several sizes: what is kept is
// the newest output, never more than the cap, never less than half of it once
// that much was written, and Dropped accounts for the rest.
func TestBootBounds(t *testing.T) {
	for _, tc := range []struct {
		name         string
		capBytes     int64
		total, chunk int
	}{
		{"under the cap", 64, 40, 7},
		{"exactly the cap", 64, 64, 8},
		{"one over", 64, 65, 65},
		{"many segments", 64, 1000, 13},
		{"one huge write", 64, 1000, 1000},
		{"odd cap", 7, 100, 3},
		{"byte by byte", 10, 95, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Open(t.TempDir(), Options{Boots: 3, BootBytes: tc.capBytes})
			if err != nil {
				t.Fatal(err)
			}
			w, err := l.NewBoot("m1", "commission", t0)
			if err != nil {
				t.Fatal(err)
			}
			var all []byte
			for i := 0; len(all) < tc.total; i++ {
				n := min(tc.chunk, tc.total-len(all))
				p := bytes.Repeat([]byte{byte('a' + i%26)}, n)
				if got, err := w.Write(p); err != nil || got != n {
					t.Fatalf("write %d: %d, %v", n, got, err)
				}
				all = append(all, p...)
				if on := dirBytes(t, filepath.Join(l.dir, "m1")); on > l.opts.BootBytes/2*2 {
					t.Fatalf("%d bytes on disk, cap %d", on, tc.capBytes)
				}
			}
			w.Close()
			b, data, err := l.Read("m1", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(all, data) {
				t.Fatalf("kept %q is not the end of what was written", data)
			}
			seg := tc.capBytes / 2
			if int64(len(data)) > 2*seg || (int64(len(all)) >= seg && int64(len(data)) < seg) {
				t.Errorf("kept %d bytes of %d, cap %d", len(data), len(all), tc.capBytes)
			}
			if b.Bytes != int64(len(data)) || b.Dropped+b.Bytes != int64(len(all)) {
				t.Errorf("boot %+v: kept %d of %d", b, len(data), len(all))
			}
			if b.N != 1 || b.Phase != "commission" || !b.Started.Equal(t0) {
				t.Errorf("boot record %+v", b)
			}
		})
	}
}

// TestBootRing: the ring keeps the last Boots boots and numbers them on.
func TestBootRing(t *testing.T) {
	for _, tc := range []struct {
		ring, boots int
		want        []int
	}{
		{ring: 5, boots: 1, want: []int{1}},
		{ring: 5, boots: 5, want: []int{1, 2, 3, 4, 5}},
		{ring: 5, boots: 6, want: []int{2, 3, 4, 5, 6}},
		{ring: 2, boots: 9, want: []int{8, 9}},
		{ring: 1, boots: 3, want: []int{3}},
	} {
		t.Run(fmt.Sprintf("%d of %d", tc.ring, tc.boots), func(t *testing.T) {
			l, err := Open(t.TempDir(), Options{Boots: tc.ring, BootBytes: 100})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= tc.boots; i++ {
				w, err := l.NewBoot("m", "deploy", t0.Add(time.Duration(i)*time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(w, "boot %d\n", i)
				w.Close()
			}
			bs, err := l.Boots("m")
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, b := range bs {
				got = append(got, b.N)
				_, data, err := l.Read("m", b.N)
				if err != nil || string(data) != fmt.Sprintf("boot %d\n", b.N) {
					t.Errorf("boot %d: %q %v", b.N, data, err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("boots %v, want %v", got, tc.want)
			}
			ents, _ := os.ReadDir(filepath.Join(l.dir, "m"))
			if len(ents) != 2*len(tc.want) {
				t.Errorf("%d files for %d boots", len(ents), len(tc.want))
			}
			if _, _, err := l.Read("m", tc.want[0]-1); tc.want[0] > 1 && !errors.Is(err, ErrNoBoot) {
				t.Errorf("a rotated boot read: %v", err)
			}
		})
	}
}

// TestResumeAfterRestart: a new Log on the same directory (rackd restarted
// mid-phase) continues the newest boot, keeps its bound and its tail.
func TestResumeAfterRestart(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(dir, Options{BootBytes: 20})
	w, _ := l.NewBoot("m", "commission", t0)
	w.Write([]byte("0123456789abcdef"))
	w.Close()

	l2, _ := Open(dir, Options{BootBytes: 20})
	w2, err := l2.Resume("m", "commission", t0)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Boot() != 1 {
		t.Fatalf("resumed boot %d", w2.Boot())
	}
	w2.Write([]byte("ghijklmnop"))
	w2.Close()
	_, data, _ := l2.Read("m", 0)
	if !strings.HasSuffix("0123456789abcdefghijklmnop", string(data)) || len(data) < 10 || len(data) > 20 {
		t.Errorf("after resume: %q", data)
	}
	tail, err := l2.Tail("m", 4)
	if err != nil || string(tail) != "mnop" {
		t.Errorf("tail %q %v", tail, err)
	}
	// Resume of a machine without boots starts one.
	w3, err := l2.Resume("other", "deploy", t0)
	if err != nil || w3.Boot() != 1 {
		t.Fatalf("resume without boots: %v", err)
	}
	w3.Close()
	if err := l2.Remove("m"); err != nil {
		t.Fatal(err)
	}
	if bs, err := l2.Boots("m"); err != nil || len(bs) != 0 {
		t.Errorf("after remove: %v %v", bs, err)
	}
	if tail, err := l2.Tail("m", 4); err != nil || tail != nil {
		t.Errorf("tail after remove: %q %v", tail, err)
	}
	ms, _ := l2.Machines()
	if fmt.Sprint(ms) != "[other]" {
		t.Errorf("machines %v", ms)
	}
}

func TestBadMachineID(t *testing.T) {
	l, _ := Open(t.TempDir(), Options{})
	for _, id := range []string{"", ".", "..", "a/b", `a\b`, "a\x00b"} {
		if _, err := l.NewBoot(id, "", t0); err == nil {
			t.Errorf("NewBoot(%q) accepted", id)
		}
		if err := l.Remove(id); err == nil {
			t.Errorf("Remove(%q) accepted", id)
		}
	}
}
