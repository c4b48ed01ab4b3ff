package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"rackd/internal/atomicfile"
)

// Data is the layout of the data partition, mounted at Dir (/data).
type Data struct{ Dir string }

// The data partition's files, relative to its root.
const (
	RackdConfigFile     = "etc/rackd.toml"
	ApplianceConfigFile = "etc/appliance.toml"
	StateDir            = "state"
	LogFile             = "log/rackd.log"
	StatusFile          = "appliance/status.json"
	AdminTokenFile      = "state/admin.token"
)

// Path is a file of the data partition.
func (d Data) Path(rel string) string { return filepath.Join(d.Dir, rel) }

// Prepare makes the data partition's directories and, where they are
// missing, its config files: appliance.toml is the ESP's seed when there
// is one (seed, the path of /esp/grub/appliance.toml; a missing seed is
// no error), else the default. It returns whether it wrote appliance.toml.
func (d Data) Prepare(seed string) (wroteConfig bool, err error) {
	for _, dir := range []string{"etc", StateDir, "log", "appliance"} {
		if err := os.MkdirAll(d.Path(dir), 0o755); err != nil {
			return false, err
		}
	}
	if err := os.Chmod(d.Path(StateDir), 0o700); err != nil {
		return false, err
	}
	dst := d.Path(ApplianceConfigFile)
	if _, err := os.Stat(dst); err == nil {
		return false, nil
	}
	body := []byte(DefaultConfigTOML)
	if seed != "" {
		b, err := os.ReadFile(seed)
		switch {
		case err == nil:
			if _, err := ParseConfig(b); err != nil {
				return false, fmt.Errorf("the ESP's %s: %w", filepath.Base(seed), err)
			}
			body = b
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("read the ESP's seed config: %w", err)
		}
	}
	if err := atomicfile.WriteFile(dst, body, atomicfile.Options{Perm: 0o644}); err != nil {
		return false, err
	}
	return true, nil
}

// LoadConfig reads appliance.toml (the defaults when it is missing).
func (d Data) LoadConfig() (Config, error) {
	b, err := os.ReadFile(d.Path(ApplianceConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Defaults(), nil
	}
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(b)
}

// RackdListenPort is the port of rackd's API in the default rackd.toml.
const RackdListenPort = 5240

// RackdConfig is the rackd.toml first boot writes: the API on every
// address, the state on the data partition, DHCP and TFTP on the rack
// interfaces, and the appliance descriptor the init writes under /run.
func RackdConfig(stateDir string, dhcpInterfaces []string, descriptor string) string {
	q := make([]string, len(dhcpInterfaces))
	for i, n := range dhcpInterfaces {
		q[i] = strconv.Quote(n)
	}
	return fmt.Sprintf(`# rackd's configuration on the appliance, written at first boot; the
# documented defaults of every key are in rackd's default.toml. The
# appliance's own settings (management and rack interfaces, health window,
# logs) are in appliance.toml beside this file.
listen = "0.0.0.0:%d"
state_dir = %s

[dhcp]
# The rack interfaces (appliance.toml [rack]) that have an address.
interfaces = [%s]

[tftp]
listen = "0.0.0.0:69"

[appliance]
descriptor = %s
`, RackdListenPort, strconv.Quote(stateDir), strings.Join(q, ", "), strconv.Quote(descriptor))
}

// WriteRackdConfig writes rackd.toml when it is missing.
func (d Data) WriteRackdConfig(dhcpInterfaces []string, descriptor string) (bool, error) {
	dst := d.Path(RackdConfigFile)
	if _, err := os.Stat(dst); err == nil {
		return false, nil
	}
	body := RackdConfig(d.Path(StateDir), dhcpInterfaces, descriptor)
	if err := atomicfile.WriteFile(dst, []byte(body), atomicfile.Options{Perm: 0o644}); err != nil {
		return false, err
	}
	return true, nil
}
