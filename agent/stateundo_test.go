package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestStateUndo: a failed start removes what it made in the state
// directory, and nothing that was there before it.
func TestStateUndo(t *testing.T) {
	names := func(dir string) []string {
		t.Helper()
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	mkfiles := func(dir string, files ...string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "images"), 0o750); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("absent, and its parent", func(t *testing.T) {
		base := t.TempDir()
		dir := filepath.Join(base, "var", "state")
		u, err := noteStateDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		mkfiles(dir, "rackd.db", "admin.token")
		if err := u.remove(); err != nil {
			t.Fatal(err)
		}
		if got := names(base); len(got) != 0 {
			t.Errorf("left %v in %s, want nothing", got, base)
		}
	})
	t.Run("empty", func(t *testing.T) {
		dir := t.TempDir()
		u, err := noteStateDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		mkfiles(dir, "rackd.db", "credential.key")
		if err := u.remove(); err != nil {
			t.Fatal(err)
		}
		if got := names(dir); len(got) != 0 {
			t.Errorf("left %v, want the directory empty", got)
		}
	})
	t.Run("with an operator's files", func(t *testing.T) {
		dir := t.TempDir()
		mkfiles(dir, "rackd.toml", "secrets.key")
		u, err := noteStateDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		mkfiles(dir, "rackd.db", "admin.token")
		if err := u.remove(); err != nil {
			t.Fatal(err)
		}
		if got, want := names(dir), []string{"images", "rackd.toml", "secrets.key"}; !slices.Equal(got, want) {
			t.Errorf("left %v, want %v (what was there before)", got, want)
		}
	})
}
