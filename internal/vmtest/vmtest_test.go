package vmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("RepoRoot %s holds no go.mod: %v", root, err)
	}
	if wd, _ := os.Getwd(); !strings.HasPrefix(wd, root) || filepath.Base(wd) != "vmtest" {
		t.Fatalf("RepoRoot %s is not above the package directory %s", root, wd)
	}
}

func TestScript(t *testing.T) {
	out, err := Script(t, time.Minute, []string{"VMTEST_X=from the test"}, "-c", `echo "$VMTEST_X in $PWD"`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "from the test in " + RepoRoot(t); strings.TrimSpace(string(out)) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	// A child left behind holding the output pipe must not keep Script
	// waiting past its bound: the whole group goes at the deadline.
	start := time.Now()
	_, err = Script(t, 2*time.Second, nil, "-c", "sleep 300 & sleep 300")
	if err == nil || !strings.Contains(err.Error(), "killed at its 2s bound") {
		t.Errorf("a script past its bound: error %v, want it killed at its bound", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("Script returned %v after a 2 s bound: its process group outlived the deadline", d)
	}
}
