package agent

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"rackd/store/kv/etcdkv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultConfigTOML is the documented default configuration; it is what rackd
// runs with when no file is given.
//
//go:embed default.toml
var DefaultConfigTOML string

// Duration is a time.Duration written as "30s" or "1h30m" in the config file.
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"30s\" or \"1h30m\")", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// StoreConfig is where the database lives: the file in the state
// directory, or an etcd cluster (URL).
type StoreConfig struct {
	MaxBatch          int      `toml:"max_batch"`
	AcceptLostSecrets bool     `toml:"accept_lost_secrets"`
	URL               string   `toml:"url"`
	CommitTimeout     Duration `toml:"commit_timeout"`
	EtcdPrefix        string   `toml:"etcd_prefix"`
	EtcdCA            string   `toml:"etcd_ca"`
	EtcdCert          string   `toml:"etcd_cert"`
	EtcdKey           string   `toml:"etcd_key"`
	EtcdUser          string   `toml:"etcd_user"`
	EtcdPasswordFile  string   `toml:"etcd_password_file"`
}

// Config is rackd's configuration; default.toml documents every field.
type Config struct {
	Listen    string `toml:"listen"`
	Name      string `toml:"name"`
	StateDir  string `toml:"state_dir"`
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
	API       struct {
		MaxBodyBytes    int64    `toml:"max_body_bytes"`
		ReadTimeout     Duration `toml:"read_timeout"`
		ShutdownTimeout Duration `toml:"shutdown_timeout"`
	} `toml:"api"`
	Lifecycle struct {
		CommissioningTimeout Duration `toml:"commissioning_timeout"`
		DeployingTimeout     Duration `toml:"deploying_timeout"`
		ReleasingTimeout     Duration `toml:"releasing_timeout"`
		WatchdogInterval     Duration `toml:"watchdog_interval"`
	} `toml:"lifecycle"`
	Store   StoreConfig   `toml:"store"`
	Console ConsoleConfig `toml:"console"`
	IPAM    struct {
		StickyOnCommission bool     `toml:"sticky_on_commission"`
		OfferHold          Duration `toml:"offer_hold"`
		PXELease           Duration `toml:"pxe_lease"`
		Quarantine         Duration `toml:"quarantine"`
	} `toml:"ipam"`
	DHCP struct {
		Interfaces   []string `toml:"interfaces"`
		Listen       []string `toml:"listen"`
		Workers      int      `toml:"workers"`
		Queue        int      `toml:"queue"`
		ProbeTimeout Duration `toml:"probe_timeout"`
		CommitDelay  Duration `toml:"commit_delay"`
		CommitBatch  int      `toml:"commit_batch"`
		ReadCoalesce Duration `toml:"read_coalesce"`
		NextServer   string   `toml:"next_server"`
		HTTPURL      string   `toml:"http_url"`
	} `toml:"dhcp"`
	TFTP struct {
		Listen       string `toml:"listen"`
		MaxTransfers int    `toml:"max_transfers"`
	} `toml:"tftp"`
	DNS struct {
		Listen string   `toml:"listen"`
		TTL    Duration `toml:"ttl"`
	} `toml:"dns"`
	Power   PowerConfig   `toml:"power"`
	Cluster ClusterConfig `toml:"cluster"`
	Boot    struct {
		DefaultFirst int `toml:"default_first"`
	} `toml:"boot"`
	Enlist struct {
		AutoCommission bool    `toml:"auto_commission"`
		RateLimit      float64 `toml:"rate_limit"`
		RateBurst      int     `toml:"rate_burst"`
		MaxBodyBytes   int64   `toml:"max_body_bytes"`
	} `toml:"enlist"`
	Metadata struct {
		CredentialBinding string `toml:"credential_binding"`
	} `toml:"metadata"`
	Appliance struct {
		Descriptor string `toml:"descriptor"`
	} `toml:"appliance"`
}

// The values of metadata.credential_binding.
const (
	// BindingDHCP grants a phase credential only to the source address of
	// the claimed MAC's DHCP binding.
	BindingDHCP = "dhcp"
	// BindingNone grants it to any source address (still once per phase).
	BindingNone = "none"
)

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	var c Config
	if err := decodeConfig(DefaultConfigTOML, &c); err != nil {
		panic("agent: embedded default.toml is invalid: " + err.Error())
	}
	return c
}

// LoadConfig returns the defaults overlaid with the file at path (if path is
// not empty) and then with the RACKD_* environment variables.
func LoadConfig(path string, getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		if err := decodeConfig(string(data), &c); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	for env, field := range map[string]*string{
		"RACKD_LISTEN": &c.Listen, "RACKD_STATE_DIR": &c.StateDir,
		"RACKD_LOG_LEVEL": &c.LogLevel, "RACKD_LOG_FORMAT": &c.LogFormat,
		"RACKD_STORE": &c.Store.URL,
	} {
		if v := getenv(env); v != "" {
			*field = v
		}
	}
	return c, nil
}

func decodeConfig(text string, c *Config) error {
	md, err := toml.Decode(text, c)
	if err != nil {
		return err
	}
	if keys := md.Undecoded(); len(keys) > 0 {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.String()
		}
		return fmt.Errorf("unknown setting(s): %s", strings.Join(names, ", "))
	}
	return nil
}

// Validate says what is wrong with c, all at once.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen is empty"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state_dir is empty"))
	}
	if c.Store.URL != "" {
		if _, _, err := etcdkv.Endpoints(c.Store.URL); err != nil {
			errs = append(errs, fmt.Errorf("store.url: %w", err))
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q: want text or json", c.LogFormat))
	}
	if c.API.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("api.max_body_bytes %d is too small (at least 1024)", c.API.MaxBodyBytes))
	}
	if c.Lifecycle.WatchdogInterval < Duration(time.Second) {
		errs = append(errs, errors.New("lifecycle.watchdog_interval must be at least 1s"))
	}
	if c.Cluster.EtcdMember && c.Store.URL == "" {
		errs = append(errs, errors.New("cluster.etcd_member needs store.url (rackd cluster init or join sets both)"))
	}
	if c.Cluster.StartTimeout < Duration(time.Second) {
		errs = append(errs, errors.New("cluster.start_timeout must be at least 1s"))
	}
	if c.Cluster.ListenTLS != "" {
		if _, _, err := net.SplitHostPort(c.Cluster.ListenTLS); err != nil {
			errs = append(errs, fmt.Errorf("cluster.listen_tls %q: want HOST:PORT", c.Cluster.ListenTLS))
		}
	}
	if c.Store.MaxBatch < 1 {
		errs = append(errs, errors.New("store.max_batch must be at least 1"))
	}
	if c.Store.CommitTimeout < Duration(time.Second) {
		errs = append(errs, errors.New("store.commit_timeout must be at least 1s"))
	}
	for name, d := range map[string]Duration{"ipam.offer_hold": c.IPAM.OfferHold, "ipam.pxe_lease": c.IPAM.PXELease, "ipam.quarantine": c.IPAM.Quarantine} {
		if d < Duration(time.Second) {
			errs = append(errs, fmt.Errorf("%s must be at least 1s", name))
		}
	}
	if c.Enlist.RateLimit < 0 || c.Enlist.RateLimit != c.Enlist.RateLimit || (c.Enlist.RateLimit > 0 && c.Enlist.RateBurst < 1) {
		errs = append(errs, errors.New("enlist.rate_limit must be >= 0 (0: off) and enlist.rate_burst >= 1"))
	}
	if c.Enlist.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("enlist.max_body_bytes %d is too small (at least 1024)", c.Enlist.MaxBodyBytes))
	}
	if c.DHCP.Workers < 0 || c.DHCP.Queue < 1 {
		errs = append(errs, errors.New("dhcp.workers must be >= 0 and dhcp.queue >= 1"))
	}
	if c.DHCP.CommitBatch < 1 {
		errs = append(errs, errors.New("dhcp.commit_batch must be at least 1"))
	}
	if c.DHCP.ReadCoalesce < 0 || c.DHCP.ReadCoalesce > Duration(100*time.Millisecond) {
		errs = append(errs, fmt.Errorf("dhcp.read_coalesce %v: want 0s (none) up to 100ms", time.Duration(c.DHCP.ReadCoalesce)))
	}
	if _, _, err := c.dhcpAddrs(); err != nil {
		errs = append(errs, err)
	}
	if c.DHCP.NextServer != "" {
		if _, err := netip.ParseAddr(c.DHCP.NextServer); err != nil {
			errs = append(errs, fmt.Errorf("dhcp.next_server %q is not an IP address", c.DHCP.NextServer))
		}
	}
	if c.DHCP.HTTPURL != "" {
		if u, err := url.Parse(c.DHCP.HTTPURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("dhcp.http_url %q: want http://HOST:PORT", c.DHCP.HTTPURL))
		}
	}
	if b := c.Metadata.CredentialBinding; b != BindingDHCP && b != BindingNone {
		errs = append(errs, fmt.Errorf("metadata.credential_binding %q: want %q or %q", b, BindingDHCP, BindingNone))
	}
	if c.Boot.DefaultFirst < 0 {
		errs = append(errs, fmt.Errorf("boot.default_first %d is negative", c.Boot.DefaultFirst))
	}
	if err := c.Power.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Console.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Cluster.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DNS.Listen != "" {
		if _, err := netip.ParseAddrPort(c.DNS.Listen); err != nil {
			errs = append(errs, fmt.Errorf("dns.listen %q: want IP:PORT", c.DNS.Listen))
		}
	}
	return errors.Join(errs...)
}

// dhcpAddrs parses dhcp.listen: addresses written "IP" or "IP:PORT"; all
// must use one port (67 when none is given).
func (c Config) dhcpAddrs() ([]netip.Addr, int, error) {
	var addrs []netip.Addr
	port := 0
	for _, l := range c.DHCP.Listen {
		ap, err := netip.ParseAddrPort(l)
		if err != nil {
			ip, err2 := netip.ParseAddr(l)
			if err2 != nil || !ip.Is4() {
				return nil, 0, fmt.Errorf("dhcp.listen %q: want an IPv4 address, optionally with :PORT", l)
			}
			ap = netip.AddrPortFrom(ip, 67)
		}
		if port != 0 && int(ap.Port()) != port {
			return nil, 0, fmt.Errorf("dhcp.listen: all addresses must use the same port")
		}
		port = int(ap.Port())
		addrs = append(addrs, ap.Addr())
	}
	if port == 0 {
		port = 67
	}
	return addrs, port, nil
}
