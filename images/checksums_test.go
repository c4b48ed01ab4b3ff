package images

import (
	"crypto/sha512"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rackd/internal/netnstest"
)

func sum512(b []byte) string { h := sha512.Sum512(b); return hex.EncodeToString(h[:]) }

func TestParseChecksums(t *testing.T) {
	a, b := sum([]byte("a")), sum([]byte("b"))
	a5 := sum512([]byte("a"))
	for _, tc := range []struct {
		name, list, file string
		want             Checksums
		err              string
	}{
		{"text mode", a + "  disk.img\n" + b + "  other.img\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"binary mode", b + " *other.img\n" + a + " *disk.img\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"crlf", a + " *disk.img\r\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"upper hex", strings.ToUpper(a) + "  disk.img", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"dot slash", a + "  ./disk.img\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"sha512", a5 + "  disk.img\n", "disk.img", Checksums{AlgoSHA512: a5}, ""},
		{"bsd", "SHA256 (disk.img) = " + a + "\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"bsd both", "SHA512 (disk.img) = " + a5 + "\nSHA256 (disk.img) = " + a + "\n", "disk.img", Checksums{AlgoSHA256: a, AlgoSHA512: a5}, ""},
		{"bsd odd name", "SHA256 (a) = b.img) = " + a + "\n", "a) = b.img", Checksums{AlgoSHA256: a}, ""},
		{"spaces in name", a + "  my disk.img\n", "my disk.img", Checksums{AlgoSHA256: a}, ""},
		{"escaped name", `\` + a + `  a\\b\nc` + "\n", "a\\b\nc", Checksums{AlgoSHA256: a}, ""},
		{"fedora style", "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n# Fedora-Cloud.qcow2: 123 bytes\nSHA256 (Fedora-Cloud.qcow2) = " + a +
			"\n-----BEGIN PGP SIGNATURE-----\niQIzBAEBCAAdFiEE\n-----END PGP SIGNATURE-----\n", "Fedora-Cloud.qcow2", Checksums{AlgoSHA256: a}, ""},
		{"same twice", a + "  disk.img\n" + a + " *disk.img\n", "disk.img", Checksums{AlgoSHA256: a}, ""},
		{"conflict", a + "  disk.img\n" + b + "  disk.img\n", "disk.img", nil, "two different sha256 digests"},
		{"absent", a + "  other.img\n", "disk.img", nil, `no entry for "disk.img" (it lists 1 files)`},
		{"prefix is not the name", a + "  disk.img.xz\n", "disk.img", nil, "no entry"},
		{"directory is not the name", a + "  sub/disk.img\n", "disk.img", nil, "no entry"},
		{"short hex", a[:63] + "  disk.img\n", "disk.img", nil, "no entry"},
		{"one space", a + " disk.img\n", "disk.img", nil, "no entry"},
		{"md5", "d41d8cd98f00b204e9800998ecf8427e  disk.img\n", "disk.img", nil, "no entry"},
		{"bad escape", `\` + a + `  a\tb` + "\n", "a\\tb", nil, "no entry"},
		{"empty", "", "disk.img", nil, "no entry"},
		{"too big", strings.Repeat("x", MaxChecksumsSize+1), "disk.img", nil, "at most"},
	} {
		got, err := ParseChecksums([]byte(tc.list), tc.file)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, %v; want an error with %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got[k], v)
			}
		}
	}
}

// The lists the real sha256sum and sha512sum write, in both forms, give
// back the digests of the files they list.
func TestParseChecksumsOfRealTools(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{"debian-12-genericcloud-amd64.qcow2": []byte("qcow2 bytes"), "noble.img": []byte("raw"), "a b.raw": []byte("spaced")}
	var names []string
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	for _, tc := range []struct {
		tool string
		args []string
		algo string
	}{
		{"sha256sum", nil, AlgoSHA256},
		{"sha256sum", []string{"--binary"}, AlgoSHA256},
		{"sha256sum", []string{"--tag"}, AlgoSHA256},
		{"sha512sum", nil, AlgoSHA512},
		{"sha512sum", []string{"--tag"}, AlgoSHA512},
	} {
		netnstest.Tool(t, tc.tool)
		cmd := exec.Command(tc.tool, append(tc.args, names...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		for n, b := range files {
			got, err := ParseChecksums(out, n)
			want := sum(b)
			if tc.algo == AlgoSHA512 {
				want = sum512(b)
			}
			if err != nil || got[tc.algo] != want || len(got) != 1 {
				t.Errorf("%s %v: %s: %v %v, want %s\n%s", tc.tool, tc.args, n, got, err, want, out)
			}
		}
	}
}

// Whatever the list, a digest found is well-formed hex of its algorithm,
// and a line the GNU tools would write for any name is found again.
func FuzzParseChecksums(f *testing.F) {
	a := sum([]byte("a"))
	f.Add([]byte(a+"  disk.img\n"), "disk.img")
	f.Add([]byte("SHA256 (disk.img) = "+a), "disk.img")
	f.Add([]byte(`\`+a+`  a\\b`), `a\b`)
	f.Add([]byte("SHA512 (x) = "+sum512(nil)+"\r\n"), "x")
	f.Add([]byte("-----BEGIN PGP SIGNED MESSAGE-----\n"), "x")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		got, err := ParseChecksums(data, name)
		if err == nil {
			if len(got) == 0 {
				t.Fatal("no error and no digest")
			}
			for algo, h := range got {
				if !isDigest(h, algo) {
					t.Fatalf("%s digest %q is not %s hex", algo, h, algo)
				}
			}
		}
		if name == "" || strings.ContainsAny(name, "\n\r\\") || strings.HasPrefix(name, "./") || len(data) > MaxChecksumsSize/2 {
			return
		}
		// A list ending with the line sha256sum would write for name.
		list := append(append([]byte{}, data...), []byte("\n"+a+"  "+name+"\n")...)
		got, err = ParseChecksums(list, name)
		if err != nil {
			if strings.Contains(err.Error(), "two different") {
				return // the fuzzed part listed name with another digest
			}
			t.Fatalf("the line for %q is not found: %v", name, err)
		}
		if got[AlgoSHA256] != a && !strings.Contains(string(data), name) {
			t.Fatalf("%q: got %v", name, got)
		}
	})
}
