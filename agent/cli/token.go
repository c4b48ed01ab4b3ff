package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SystemTokenFile is where a packaged rackd (state dir /var/lib/rackd) keeps
// the admin token it writes on first start.
const SystemTokenFile = "/var/lib/rackd/admin.token"

// tokenFile returns the admin token file to read when no token is given:
// $RACKD_STATE_DIR/admin.token, else ./var/admin.token if it exists (where
// `make run` keeps its state, so that the CLI works from the checkout),
// else the system one (SystemTokenFile unless WithSystemTokenFile said).
func (e *env) tokenFile() string {
	if dir := os.Getenv("RACKD_STATE_DIR"); dir != "" {
		return filepath.Join(dir, "admin.token")
	}
	local := filepath.Join("var", "admin.token")
	if _, err := os.Stat(local); err == nil {
		return local
	}
	if e.systemTokenFile != "" {
		return e.systemTokenFile
	}
	return SystemTokenFile
}

// resolveToken returns the API token: flagToken (--token/--api-token), else
// RACKD_TOKEN, else the content of the admin token file.
func (e *env) resolveToken(flagToken string) (string, error) {
	if flagToken != "" {
		return flagToken, nil
	}
	if tok := os.Getenv("RACKD_TOKEN"); tok != "" {
		return tok, nil
	}
	path := e.tokenFile()
	b, err := os.ReadFile(path)
	if err != nil {
		// The path error already names the file; say what else would do.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("no API token: give --token or RACKD_TOKEN, or set RACKD_STATE_DIR to rackd's state dir (tried %s: %v)", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("no API token: %s is empty; give --token or RACKD_TOKEN", path)
	}
	return tok, nil
}
