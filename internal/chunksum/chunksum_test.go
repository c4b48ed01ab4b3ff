package chunksum

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"strings"
	"testing"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// The Writer's list is the SHA-256 of each chunk, whatever the sizes of
// the writes that carried the bytes.
func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		cs    int64
		write int
	}{
		{"one short chunk", 1000, MinSize, 333},
		{"exact chunks", 3 * MinSize, MinSize, 1 << 16},
		{"ragged end", 2*MinSize + 17, MinSize, 4097},
		{"one byte more", MinSize + 1, MinSize, MinSize + 1},
		{"default size", Size + 5, 0, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randBytes(tc.size, uint64(tc.size))
			w := &Writer{ChunkSize: tc.cs}
			for p := data; len(p) > 0; {
				k := min(len(p), tc.write)
				w.Write(p[:k])
				p = p[k:]
			}
			l := w.List()
			cs := tc.cs
			if cs == 0 {
				cs = Size
			}
			if l.ChunkSize != cs || l.ImageSize != int64(tc.size) {
				t.Fatalf("list of %d bytes in %d, want %d in %d", l.ImageSize, l.ChunkSize, tc.size, cs)
			}
			if err := l.Check(); err != nil {
				t.Fatal(err)
			}
			for i := range l.Sums {
				off, n := l.Chunk(i)
				if want := sha256.Sum256(data[off : off+n]); l.Sums[i] != want {
					t.Errorf("chunk %d: %x, want %x", i, l.Sums[i], want)
				}
			}
			back, err := Parse(l.Marshal())
			if err != nil {
				t.Fatalf("parse what Marshal wrote: %v\n%s", err, l.Marshal())
			}
			if back.ChunkSize != l.ChunkSize || back.ImageSize != l.ImageSize || len(back.Sums) != len(l.Sums) {
				t.Fatalf("round trip: %+v, want %+v", back, l)
			}
			for i := range l.Sums {
				if back.Sums[i] != l.Sums[i] {
					t.Errorf("round trip: chunk %d differs", i)
				}
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	sum := strings.Repeat("ab", 32) + "\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "not a rackd-chunks/1"},
		{"other magic", "rackd-chunks/2 sha256 1048576 1\n" + sum, "not a rackd-chunks/1"},
		{"no newline", "rackd-chunks/1 sha256 1048576 1", "does not end"},
		{"one size", "rackd-chunks/1 sha256 1048576\n" + sum, "wants a chunk size and an image size"},
		{"zero image", "rackd-chunks/1 sha256 1048576 0\n", "image size"},
		{"leading zero", "rackd-chunks/1 sha256 01048576 1\n" + sum, "positive decimal"},
		{"sign", "rackd-chunks/1 sha256 +1048576 1\n" + sum, "positive decimal"},
		{"three sizes", "rackd-chunks/1 sha256 1048576 1 2\n" + sum, "image size"},
		{"small chunks", "rackd-chunks/1 sha256 4096 1\n" + sum, "power of two"},
		{"odd chunks", "rackd-chunks/1 sha256 3145728 1\n" + sum, "power of two"},
		{"huge chunks", "rackd-chunks/1 sha256 134217728 1\n" + sum, "power of two"},
		{"huge image", "rackd-chunks/1 sha256 1048576 2199023255553\n" + sum, "image size"},
		{"overflow", "rackd-chunks/1 sha256 1048576 99999999999999999999\n" + sum, "image size"},
		{"too few", "rackd-chunks/1 sha256 1048576 1048577\n" + sum, "want 2"},
		{"too many", "rackd-chunks/1 sha256 1048576 1048576\n" + sum + sum, "want 1"},
		{"upper case", "rackd-chunks/1 sha256 1048576 1\n" + strings.ToUpper(sum), "lower-case hex"},
		{"no last newline", "rackd-chunks/1 sha256 1048576 1\n" + strings.TrimSuffix(sum, "\n"), "lines of 64"},
		{"trailing", "rackd-chunks/1 sha256 1048576 1\n" + sum + "x", "lines of 64"},
		{"crlf", "rackd-chunks/1 sha256 1048576 1\r\n" + sum, "positive decimal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	w := &Writer{ChunkSize: MinSize}
	w.Write(randBytes(MinSize+3, 1))
	f.Add(w.List().Marshal())
	f.Add([]byte("rackd-chunks/1 sha256 1048576 1\n" + strings.Repeat("0", 64) + "\n"))
	f.Add([]byte("rackd-chunks/1 sha256 4194304 1099511627776\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Parse(b)
		if err != nil {
			return
		}
		if err := l.Check(); err != nil {
			t.Fatalf("Parse accepted a list Check refuses: %v", err)
		}
		if !bytes.Equal(l.Marshal(), b) {
			t.Fatalf("Parse accepted %q, which Marshal writes as %q", b, l.Marshal())
		}
	})
}
