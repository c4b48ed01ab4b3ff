package etcdmember

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"rackd/internal/atomicfile"
)

// ConfigFile is the etcd member's configuration in a member's directory
// (etcd --config-file).
const ConfigFile = "etcd.yml"

// DataDir is the member's data directory, beside the member's directory
// in the state directory.
const DataDir = "etcd"

// Member is one etcd member's identity and where it listens.
type Member struct {
	Name string
	// PeerURL and ClientURL are https://HOST:PORT, advertised to the
	// other members and to clients; the member listens on them.
	PeerURL   string
	ClientURL string
}

// Hosts are the host parts of m's URLs, for its certificates.
func (m Member) Hosts() []string {
	var hs []string
	for _, u := range []string{m.PeerURL, m.ClientURL} {
		if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" {
			hs = append(hs, pu.Hostname())
		}
	}
	return hs
}

// Validate says what is wrong with m.
func (m Member) Validate() error {
	var errs []error
	if m.Name == "" || strings.ContainsAny(m.Name, "=, \t\n") {
		errs = append(errs, fmt.Errorf("member name %q: want a non-empty name without '=', ',' or spaces", m.Name))
	}
	for what, u := range map[string]string{"peer URL": m.PeerURL, "client URL": m.ClientURL} {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "https" || pu.Port() == "" || pu.Hostname() == "" || (pu.Path != "" && pu.Path != "/") {
			errs = append(errs, fmt.Errorf("%s %q: want https://HOST:PORT", what, u))
		}
	}
	return errors.Join(errs...)
}

// Settings are an etcd member's configuration file: who it is, who the
// cluster was when it started, and its certificates (under Dir).
type Settings struct {
	Member
	// Dir is the member's directory: its certificates, keys and this file.
	Dir string
	// DataDir is etcd's data directory.
	DataDir string
	// InitialCluster is every member at this one's start: name -> peer URL.
	InitialCluster map[string]string
	// Existing is true for a member joining a running cluster.
	Existing bool
	// Token is the cluster's initial-cluster-token.
	Token string
}

// etcdConfig is the subset of etcd 3.4's configuration file rackd writes.
type etcdConfig struct {
	Name                     string       `yaml:"name"`
	DataDir                  string       `yaml:"data-dir"`
	ListenPeerURLs           string       `yaml:"listen-peer-urls"`
	ListenClientURLs         string       `yaml:"listen-client-urls"`
	InitialAdvertisePeerURLs string       `yaml:"initial-advertise-peer-urls"`
	AdvertiseClientURLs      string       `yaml:"advertise-client-urls"`
	InitialCluster           string       `yaml:"initial-cluster"`
	InitialClusterState      string       `yaml:"initial-cluster-state"`
	InitialClusterToken      string       `yaml:"initial-cluster-token"`
	ClientTransportSecurity  etcdSecurity `yaml:"client-transport-security"`
	PeerTransportSecurity    etcdSecurity `yaml:"peer-transport-security"`
	Logger                   string       `yaml:"logger"`
	LogLevel                 string       `yaml:"log-level"`
	LogOutputs               []string     `yaml:"log-outputs"`
	// A member of a cluster that lost quorum must not be added to
	// another by mistake: strict checks refuse such reconfigurations.
	StrictReconfigCheck bool `yaml:"strict-reconfig-check"`
}

type etcdSecurity struct {
	CertFile       string `yaml:"cert-file"`
	KeyFile        string `yaml:"key-file"`
	ClientCertAuth bool   `yaml:"client-cert-auth"`
	TrustedCAFile  string `yaml:"trusted-ca-file"`
}

// Write writes s as etcd's configuration file into s.Dir.
func (s Settings) Write() (string, error) {
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("etcdmember: %w", err)
	}
	if _, ok := s.InitialCluster[s.Name]; !ok {
		return "", fmt.Errorf("etcdmember: the initial cluster does not hold %s itself", s.Name)
	}
	names := make([]string, 0, len(s.InitialCluster))
	for n := range s.InitialCluster {
		names = append(names, n)
	}
	sort.Strings(names)
	var ic []string
	for _, n := range names {
		ic = append(ic, n+"="+s.InitialCluster[n])
	}
	state := "new"
	if s.Existing {
		state = "existing"
	}
	sec := func(k Kind) etcdSecurity {
		return etcdSecurity{CertFile: filepath.Join(s.Dir, CertFile(k)), KeyFile: filepath.Join(s.Dir, KeyFile(k)),
			ClientCertAuth: true, TrustedCAFile: filepath.Join(s.Dir, CACert)}
	}
	c := etcdConfig{
		Name: s.Name, DataDir: s.DataDir,
		ListenPeerURLs: listenURL(s.PeerURL), ListenClientURLs: listenURL(s.ClientURL),
		InitialAdvertisePeerURLs: s.PeerURL, AdvertiseClientURLs: s.ClientURL,
		InitialCluster: strings.Join(ic, ","), InitialClusterState: state, InitialClusterToken: s.Token,
		ClientTransportSecurity: sec(Server), PeerTransportSecurity: sec(Peer),
		Logger: "zap", LogLevel: "warn", LogOutputs: []string{"stderr"},
		StrictReconfigCheck: true,
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("etcdmember: %w", err)
	}
	b = append([]byte("# The etcd member beside rackd, written by rackd cluster init/join;\n# rackd serve runs etcd --config-file with it (cluster.etcd_member).\n"), b...)
	path := filepath.Join(s.Dir, ConfigFile)
	if err := atomicfile.WriteFile(path, b, atomicfile.Options{Perm: 0o600}); err != nil {
		return "", fmt.Errorf("etcdmember: write %s: %w", path, err)
	}
	return path, nil
}

// listenURL is where a member listens for an advertised URL: the same
// address, except that a name listens on every address (etcd listens on
// IP addresses only).
func listenURL(adv string) string {
	u, err := url.Parse(adv)
	if err != nil || net.ParseIP(u.Hostname()) != nil {
		return adv
	}
	return "https://" + net.JoinHostPort("0.0.0.0", u.Port())
}

// ClientTLS is rackd's TLS as a client of the cluster (etcd and the other
// agents): its client certificate, and the CA as the only root.
func ClientTLS(dir string) (*tls.Config, error) {
	roots, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile(Client)), filepath.Join(dir, KeyFile(Client)))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: client certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{cert}}, nil
}

// ServerTLS is rackd's cluster listener: its server certificate; a client
// certificate is asked for and, when given, must chain to the cluster CA
// (the handlers decide who needs one).
func ServerTLS(dir string) (*tls.Config, error) {
	roots, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile(Server)), filepath.Join(dir, KeyFile(Server)))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: server certificate: %w", err)
	}
	// The CA goes with the chain: a joining appliance pins it (PinnedTLS).
	ca, err := LoadCACert(dir)
	if err != nil {
		return nil, err
	}
	cert.Certificate = append(cert.Certificate, ca.Raw)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: roots}, nil
}

// LoadCACert reads the cluster CA's certificate of dir.
func LoadCACert(dir string) (*x509.Certificate, error) {
	b, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: cluster CA: %w", err)
	}
	c, err := parseCertPEM(b)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: %s: %w", filepath.Join(dir, CACert), err)
	}
	return c, nil
}

func caPool(dir string) (*x509.CertPool, error) {
	b, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: cluster CA: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("etcdmember: %s holds no PEM certificate", filepath.Join(dir, CACert))
	}
	return p, nil
}

// PinnedTLS trusts a server whose chain holds the CA certificate of the
// given SHA-256 fingerprint, and then only the chain to that CA: how a
// joining appliance, which has no CA yet, checks the agent it joins through.
func PinnedTLS(fingerprint string) *tls.Config {
	want := strings.ToLower(strings.ReplaceAll(fingerprint, ":", ""))
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Checked below against the pinned CA, not the system's roots.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			var ca *x509.Certificate
			for _, c := range cs.PeerCertificates {
				if Fingerprint(c) == want {
					ca = c
				}
			}
			if ca == nil {
				return fmt.Errorf("the server's certificate chain holds no CA of fingerprint %s (wrong --ca-sha256, or not that cluster's agent)", want)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("the server's certificate: %w", err)
			}
			return nil
		},
	}
}

// ReadMember reads the member of a configuration file Settings.Write wrote.
func ReadMember(path string) (Member, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Member{}, fmt.Errorf("etcdmember: %w", err)
	}
	var c etcdConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return Member{}, fmt.Errorf("etcdmember: %s: %w", path, err)
	}
	m := Member{Name: c.Name, PeerURL: c.InitialAdvertisePeerURLs, ClientURL: c.AdvertiseClientURLs}
	if err := m.Validate(); err != nil {
		return m, fmt.Errorf("etcdmember: %s: %w", path, err)
	}
	return m, nil
}
