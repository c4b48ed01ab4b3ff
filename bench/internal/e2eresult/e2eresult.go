// Package e2eresult runs a real-VM e2e test for a benchmark and reads what
// the test writes for it: one key=value line per figure.
package e2eresult

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Read reads the key=value lines of path; lines without "=" are skipped.
func Read(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no result from the test: %w", err)
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		out[k] = x
	}
	return out, sc.Err()
}
