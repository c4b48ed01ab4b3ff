package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadCredentialKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	tests := map[string]struct {
		before  []byte // the key file's content, nil for none
		want    []byte // nil: a new random key
		errWant string
	}{
		"first start": {},
		"existing":    {before: key, want: key},
		"short":       {before: key[:5], errWant: "is 5 bytes, want 32"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, CredentialKeyFile)
			if tc.before != nil {
				if err := os.WriteFile(path, tc.before, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := loadCredentialKey(dir)
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err %v, want %q", err, tc.errWant)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			onDisk, rerr := os.ReadFile(path)
			switch {
			case tc.errWant != "":
				if !bytes.Equal(onDisk, tc.before) {
					t.Errorf("the bad key was changed to %x (%v)", onDisk, rerr)
				}
			case tc.want != nil:
				if !bytes.Equal(got, tc.want) || !bytes.Equal(onDisk, tc.want) {
					t.Errorf("key %x, on disk %x (%v), want %x", got, onDisk, rerr, tc.want)
				}
			default:
				if len(got) != 32 || !bytes.Equal(got, onDisk) || bytes.Equal(got, make([]byte, 32)) {
					t.Errorf("new key %x, on disk %x (%v)", got, onDisk, rerr)
				}
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
				}
				again, err := loadCredentialKey(dir)
				if err != nil || !bytes.Equal(again, got) {
					t.Errorf("the next start reads %x (%v), want %x", again, err, got)
				}
			}
			es, _ := os.ReadDir(dir)
			var names []string
			for _, e := range es {
				names = append(names, e.Name())
			}
			if !slices.Equal(names, []string{CredentialKeyFile}) {
				t.Errorf("state directory holds %q", names)
			}
		})
	}
}
