package boot

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultConfigTOML is the appliance.toml first boot writes to
// /data/etc when the ESP carries no seed (/grub/appliance.toml).
const DefaultConfigTOML = `# The rackd appliance's own settings (read by its init at boot; rackd's are
# in rackd.toml beside this file). Every key is optional.

[management]
# The interface the API is reached on: "" is the first NIC by PCI path.
interface = ""
# "dhcp", or "static" with address (CIDR), gateway and dns below.
mode = "dhcp"
address = ""
gateway = ""
dns = []

[rack]
# The interfaces facing the rack's machines (rackd serves DHCP, TFTP and
# HTTP boot there): [] is every NIC but the management one. The first gets
# address; the others each need an entry in [rack.addresses] to serve.
interfaces = []
address = "10.42.0.1/24"
# addresses = { eth2 = "10.43.0.1/24" }

[health]
# How long rackd has to become healthy after boot before an updated slot is
# given up (the previous slot boots again).
window = "5m"

[log]
# rackd's log on the data partition: rotated at max_mb, keep old files.
max_mb = 8
keep = 3
`

// Config is appliance.toml.
type Config struct {
	Management struct {
		Interface string   `toml:"interface"`
		Mode      string   `toml:"mode"`
		Address   string   `toml:"address"`
		Gateway   string   `toml:"gateway"`
		DNS       []string `toml:"dns"`
	} `toml:"management"`
	Rack struct {
		Interfaces []string          `toml:"interfaces"`
		Address    string            `toml:"address"`
		Addresses  map[string]string `toml:"addresses"`
	} `toml:"rack"`
	Health struct {
		Window duration `toml:"window"`
	} `toml:"health"`
	Log struct {
		MaxMB int `toml:"max_mb"`
		Keep  int `toml:"keep"`
	} `toml:"log"`
}

type duration time.Duration

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v <= 0 {
		return fmt.Errorf("duration %q: want a positive duration such as \"5m\"", b)
	}
	*d = duration(v)
	return nil
}

// HealthWindow is [health] window.
func (c Config) HealthWindow() time.Duration { return time.Duration(c.Health.Window) }

// Defaults is the configuration of an empty appliance.toml.
func Defaults() Config {
	c, err := ParseConfig([]byte(DefaultConfigTOML))
	if err != nil {
		panic(err) // the constant above is tested
	}
	return c
}

// ParseConfig reads appliance.toml over the defaults and checks it.
// Unknown keys are an error, so that a typo cannot be silently ignored.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	c.Management.Mode = "dhcp"
	c.Rack.Address = "10.42.0.1/24"
	c.Health.Window = duration(5 * time.Minute)
	c.Log.MaxMB, c.Log.Keep = 8, 3
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&c)
	if err != nil {
		return Config{}, fmt.Errorf("appliance.toml: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return Config{}, fmt.Errorf("appliance.toml: unknown keys %s", strings.Join(keys, ", "))
	}
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("appliance.toml: %w", err)
	}
	return c, nil
}

func (c Config) validate() error {
	var errs []error
	m := c.Management
	switch m.Mode {
	case "dhcp":
	case "static":
		if _, err := netip.ParsePrefix(m.Address); err != nil {
			errs = append(errs, fmt.Errorf("[management] mode static needs address as CIDR (e.g. 192.0.2.10/24): %q", m.Address))
		}
	default:
		errs = append(errs, fmt.Errorf("[management] mode %q: want dhcp or static", m.Mode))
	}
	if m.Address != "" {
		if p, err := netip.ParsePrefix(m.Address); err != nil || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("[management] address %q: want an IPv4 CIDR", m.Address))
		}
	}
	if m.Gateway != "" {
		if a, err := netip.ParseAddr(m.Gateway); err != nil || !a.Is4() {
			errs = append(errs, fmt.Errorf("[management] gateway %q: want an IPv4 address", m.Gateway))
		}
	}
	for _, d := range m.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			errs = append(errs, fmt.Errorf("[management] dns %q: want an IP address", d))
		}
	}
	if m.Interface != "" && slices.Contains(c.Rack.Interfaces, m.Interface) {
		errs = append(errs, fmt.Errorf("%s is both the management and a rack interface", m.Interface))
	}
	if p, err := netip.ParsePrefix(c.Rack.Address); err != nil || !p.Addr().Is4() {
		errs = append(errs, fmt.Errorf("[rack] address %q: want an IPv4 CIDR such as 10.42.0.1/24", c.Rack.Address))
	}
	for name, a := range c.Rack.Addresses {
		if p, err := netip.ParsePrefix(a); err != nil || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("[rack.addresses] %s = %q: want an IPv4 CIDR", name, a))
		}
	}
	if c.Log.MaxMB < 1 {
		errs = append(errs, fmt.Errorf("[log] max_mb %d: want at least 1", c.Log.MaxMB))
	}
	if c.Log.Keep < 0 || c.Log.Keep > 100 {
		errs = append(errs, fmt.Errorf("[log] keep %d: want 0 to 100", c.Log.Keep))
	}
	return errors.Join(errs...)
}

// Interfaces is the split of the machine's NICs (in PCI order, as NICs
// returns them) into the management interface and the rack interfaces with
// their addresses. Rack interfaces without an address are left out: rackd
// serves DHCP only where an address selects the subnet.
type Interfaces struct {
	Management string
	Rack       []RackInterface
}

// RackInterface is a rack NIC and its static address.
type RackInterface struct {
	Name    string
	Address netip.Prefix
}

// Assign splits nics by the config. An interface the config names that
// is not there is an error: the operator asked for it.
func (c Config) Assign(nics []string) (Interfaces, error) {
	var out Interfaces
	if len(nics) == 0 {
		return out, errors.New("no network interface")
	}
	out.Management = c.Management.Interface
	if out.Management == "" {
		out.Management = nics[0]
	} else if !slices.Contains(nics, out.Management) {
		return out, fmt.Errorf("[management] interface %s is not there (the NICs are %s)", out.Management, strings.Join(nics, ", "))
	}
	rack := c.Rack.Interfaces
	if len(rack) == 0 {
		for _, n := range nics {
			if n != out.Management {
				rack = append(rack, n)
			}
		}
	}
	for i, n := range rack {
		if !slices.Contains(nics, n) {
			return out, fmt.Errorf("[rack] interface %s is not there (the NICs are %s)", n, strings.Join(nics, ", "))
		}
		a, ok := c.Rack.Addresses[n]
		if !ok && i == 0 {
			a = c.Rack.Address
		}
		if a == "" {
			continue
		}
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return out, fmt.Errorf("[rack] address of %s: %w", n, err)
		}
		out.Rack = append(out.Rack, RackInterface{Name: n, Address: p})
	}
	return out, nil
}
