// Package etcdmember runs an etcd member beside rackd: the cluster's own
// certificate authority and each appliance's certificates (pki.go), the
// member's configuration file (config.go), and the supervised etcd process
// (process.go). `rackd cluster init` and `join` (agent/cli) set a member up
// with it; `rackd serve` with cluster.etcd_member runs one.
//
// Every appliance holds the same CA (certificate and key) so that any of
// them can add the next member when another is dead; its key is as
// sensitive as secrets.key beside it. Private keys are 0600 files and never
// leave the appliance that made them, except the CA's.
package etcdmember

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"rackd/internal/atomicfile"
)

// The files of a member's directory (<state dir>/cluster).
const (
	CACert = "ca.crt"
	CAKey  = "ca.key"
)

// Kind is what a certificate is for.
type Kind string

const (
	// Server is the appliance's TLS servers: etcd's client port and
	// rackd's cluster listener.
	Server Kind = "server"
	// Peer is etcd's peer port, which both accepts and dials other
	// members (server and client authentication).
	Peer Kind = "peer"
	// Client is rackd as a client: of etcd, and of the other agents
	// (fetching image blobs).
	Client Kind = "client"
)

// Kinds are the certificates every member has.
var Kinds = []Kind{Server, Peer, Client}

// CertFile and KeyFile name a kind's files in a member's directory.
func CertFile(k Kind) string { return string(k) + ".crt" }

// KeyFile is the private key of kind k.
func KeyFile(k Kind) string { return string(k) + ".key" }

const (
	caValidity   = 20 * 365 * 24 * time.Hour
	leafValidity = 10 * 365 * 24 * time.Hour
)

// CA is the cluster's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is Cert as the ca.crt file holds it.
	PEM []byte
}

// Fingerprint is the SHA-256 of the CA certificate (DER), in hex: what a
// joining appliance pins before it trusts the agent it joins through.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is the SHA-256 of c's DER encoding, in lowercase hex.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// CreateCA makes a new CA for the cluster named cluster and writes it to
// dir (ca.crt 0644, ca.key 0600). It refuses to replace an existing one:
// every member's certificates hang on it.
func CreateCA(dir, cluster string) (*CA, error) {
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		return nil, fmt.Errorf("etcdmember: %s already holds a cluster CA (%s): this appliance is in a cluster already", dir, CAKey)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: CA key: %w", err)
	}
	tmpl, err := newTemplate(pkix.Name{CommonName: "rackd cluster CA " + cluster, Organization: []string{"rackd"}}, caValidity)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: CA certificate: %w", err)
	}
	ca := &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := WriteCA(dir, ca.PEM, keyPEM); err != nil {
		return nil, err
	}
	return ca, nil
}

// WriteCA writes a CA's certificate and key into dir (a joining member
// gets them from the agent it joins through).
func WriteCA(dir string, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("etcdmember: %w", err)
	}
	if _, err := parseCertPEM(certPEM); err != nil {
		return fmt.Errorf("etcdmember: CA certificate: %w", err)
	}
	if _, err := parseKeyPEM(keyPEM); err != nil {
		return fmt.Errorf("etcdmember: CA key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CAKey), keyPEM, atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("etcdmember: write CA key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CACert), certPEM, atomicfile.Options{Perm: 0o644}); err != nil {
		return fmt.Errorf("etcdmember: write CA certificate: %w", err)
	}
	return nil
}

// LoadCA reads the CA of dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKey))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: cluster CA: %w", err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: %s: %w", CACert, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: %s: %w", CAKey, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("etcdmember: %s does not belong to %s", CAKey, CACert)
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// Issue signs a certificate of kind k for the member name, on public key
// pub, valid for hosts (IP addresses or DNS names; loopback is always
// added to servers and peers, so that the appliance reaches itself).
func (ca *CA) Issue(k Kind, name string, pub crypto.PublicKey, hosts []string) ([]byte, error) {
	if name == "" {
		return nil, errors.New("etcdmember: a certificate needs the member's name")
	}
	if _, ok := pub.(*ecdsa.PublicKey); !ok {
		return nil, fmt.Errorf("etcdmember: the %s key of %s is %T, want ECDSA P-256", k, name, pub)
	}
	tmpl, err := newTemplate(pkix.Name{CommonName: name, Organization: []string{"rackd"}, OrganizationalUnit: []string{string(k)}}, leafValidity)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	switch k {
	case Server:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case Peer:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return nil, fmt.Errorf("etcdmember: unknown certificate kind %q", k)
	}
	if k != Client {
		hosts = append(hosts, "127.0.0.1", "::1", "localhost")
		seen := map[string]bool{}
		for _, h := range hosts {
			if h == "" || seen[h] {
				continue
			}
			seen[h] = true
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: sign the %s certificate of %s: %w", k, name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// GenerateKeys makes a new private key for every kind in dir (0600) and
// returns their public keys, PEM (PKIX): what a joining member sends to be
// signed. Keys already there are replaced.
func GenerateKeys(dir string) (map[Kind][]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdmember: %w", err)
	}
	pubs := map[Kind][]byte{}
	for _, k := range Kinds {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("etcdmember: %s key: %w", k, err)
		}
		keyPEM, err := encodeKey(key)
		if err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, KeyFile(k)), keyPEM, atomicfile.Options{Perm: 0o600}); err != nil {
			return nil, fmt.Errorf("etcdmember: write %s key: %w", k, err)
		}
		der, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			return nil, fmt.Errorf("etcdmember: %s public key: %w", k, err)
		}
		pubs[k] = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	return pubs, nil
}

// ParsePublicKey reads a PEM (PKIX) public key as GenerateKeys returns it.
func ParsePublicKey(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("etcdmember: not a PEM public key")
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: public key: %w", err)
	}
	return pub, nil
}

// WriteCert installs a signed certificate of kind k in dir, after checking
// that it belongs to the key there and chains to the CA there.
func WriteCert(dir string, k Kind, certPEM []byte) error {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return fmt.Errorf("etcdmember: %s certificate: %w", k, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile(k)))
	if err != nil {
		return fmt.Errorf("etcdmember: %s certificate: %w", k, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("etcdmember: %s key: %w", k, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return fmt.Errorf("etcdmember: the %s certificate is not for this appliance's %s key", k, k)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return fmt.Errorf("etcdmember: %s certificate: %w", k, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("etcdmember: the %s certificate does not chain to the cluster CA: %w", k, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CertFile(k)), certPEM, atomicfile.Options{Perm: 0o644}); err != nil {
		return fmt.Errorf("etcdmember: write %s certificate: %w", k, err)
	}
	return nil
}

// IssueLocal makes keys and certificates of every kind in dir, signed by
// the CA there: the first member's (rackd cluster init).
func IssueLocal(dir, name string, hosts []string) error {
	ca, err := LoadCA(dir)
	if err != nil {
		return err
	}
	pubs, err := GenerateKeys(dir)
	if err != nil {
		return err
	}
	for _, k := range Kinds {
		pub, err := ParsePublicKey(pubs[k])
		if err != nil {
			return err
		}
		c, err := ca.Issue(k, name, pub, hosts)
		if err != nil {
			return err
		}
		if err := WriteCert(dir, k, c); err != nil {
			return err
		}
	}
	return nil
}

// newTemplate is a certificate for subject with a random serial number,
// valid from an hour ago (clocks of appliances differ) for validity.
func newTemplate(subject pkix.Name, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("etcdmember: serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity)}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("etcdmember: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key, want ECDSA", k)
	}
	return ek, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}
