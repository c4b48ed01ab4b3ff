package etcdkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Conn says how to reach an etcd cluster.
type Conn struct {
	// URL is etcd://HOST:PORT[,HOST:PORT...] (plain HTTP/2) or
	// etcds://... (TLS, checked against CAFile or the system's roots).
	URL string
	// CAFile, CertFile and KeyFile are PEM files: the CA that signed the
	// members' certificates, and this client's certificate and key when
	// the cluster asks for client certificates (--client-cert-auth).
	CAFile, CertFile, KeyFile string
	// Username and Password, when set, authenticate to etcd's own auth.
	Username, Password string
	// Prefix is where rackd's keys live ("/rackd/" when empty).
	Prefix string
	// DialTimeout bounds the first connection (default 10 s).
	DialTimeout time.Duration
}

// Endpoints parses an etcd:// or etcds:// URL into client endpoints.
func Endpoints(u string) ([]string, bool, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok || (scheme != "etcd" && scheme != "etcds") {
		return nil, false, fmt.Errorf("etcd URL %q: want etcd://HOST:PORT[,HOST:PORT...] or etcds://... for TLS", u)
	}
	secure := scheme == "etcds"
	var eps []string
	for _, hp := range strings.Split(strings.TrimSuffix(rest, "/"), ",") {
		host, port, err := net.SplitHostPort(strings.TrimSpace(hp))
		if err != nil || host == "" || port == "" {
			return nil, false, fmt.Errorf("etcd URL %q: member %q is not HOST:PORT", u, hp)
		}
		proto := "http"
		if secure {
			proto = "https"
		}
		eps = append(eps, proto+"://"+net.JoinHostPort(host, port))
	}
	return eps, secure, nil
}

// Dial connects to the cluster c names and returns the engine on it; the
// caller closes the client when done with the engine. It fails when no
// member answers within the dial timeout, naming the endpoints.
func Dial(ctx context.Context, c Conn) (*DB, *clientv3.Client, error) {
	eps, secure, err := Endpoints(c.URL)
	if err != nil {
		return nil, nil, err
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "/rackd/"
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: c.DialTimeout, Username: c.Username, Password: c.Password,
		Logger: zap.NewNop(), Context: ctx}
	if secure || c.CAFile != "" || c.CertFile != "" {
		if !secure {
			return nil, nil, fmt.Errorf("etcd URL %q: TLS files given for a plain etcd:// URL (use etcds://)", c.URL)
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("etcd CA: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("etcd CA %s: no PEM certificate in it", c.CAFile)
			}
		}
		if (c.CertFile == "") != (c.KeyFile == "") {
			return nil, nil, errors.New("etcd client certificate: give both the certificate and its key")
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, nil, fmt.Errorf("etcd client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %s: %w", strings.Join(eps, ","), err)
	}
	// clientv3.New does not wait for a member: ask one, bounded, so a
	// wrong address fails at start and not at the first write.
	sctx, cancel := context.WithTimeout(ctx, c.DialTimeout)
	defer cancel()
	// Under the prefix: a user of etcd's auth may read nothing else.
	if _, err := cli.Get(sctx, c.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("etcd %s: no member answered within %v: %w", strings.Join(eps, ","), c.DialTimeout, err)
	}
	return New(cli, Options{Prefix: c.Prefix}), cli, nil
}
