package e2eresult

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A module of its own whose tests stand in for the e2e tests: one records a
// figure, one records nothing, one skips, one fails.
const fakeTests = `package fake

import (
	"os"
	"testing"
)

func TestRecords(t *testing.T) {
	t.Log("bench: measured 1.5")
	if err := os.WriteFile(os.Getenv("RACKD_E2E_RESULTS"), []byte("x_s=1.5\nnote\ny_s=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSilent(t *testing.T) {}

func TestSkips(t *testing.T) { t.Skip("not here") }

func TestFails(t *testing.T) { t.Fatal("broken") }
`

func TestRunDo(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":       "module fake\n\ngo 1.26\n",
		"fake_test.go": fakeTests,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	run := func(test string, keys ...string) (map[string]float64, error) {
		return Run{Test: test, Package: "./", Timeout: 5 * time.Minute, Echo: []string{"bench: "}, Keys: keys}.Do(context.Background())
	}

	vals, err := run("TestRecords", "x_s", "y_s")
	if err != nil {
		t.Fatal(err)
	}
	if vals["x_s"] != 1.5 || vals["y_s"] != 2 || len(vals) != 2 {
		t.Errorf("figures %v, want x_s=1.5 y_s=2", vals)
	}
	for _, c := range []struct {
		test string
		keys []string
		want string
	}{
		{"TestRecords", []string{"z_s"}, "recorded no z_s"},
		{"TestSilent", nil, "no result from the test"},
		{"TestSkips", nil, "skipped"},
		{"TestFails", nil, "broken"},
	} {
		if _, err := run(c.test, c.keys...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with keys %v: error %v, want one saying %q", c.test, c.keys, err, c.want)
		}
	}
}
