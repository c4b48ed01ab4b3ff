package cli

import (
	"io"
	"testing"
)

// SetStdin makes `users ssh-keys add NAME -` read r until the test ends.
func SetStdin(t *testing.T, r io.Reader) {
	old := stdin
	stdin = r
	t.Cleanup(func() { stdin = old })
}
