package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/atomicfile"
	"rackd/internal/etcdmember"
	"rackd/store/kv/etcdkv"
)

// ClusterMemberConfig is the part of [cluster] about this appliance's own
// etcd member and the cluster's TLS listener (docs/SCALE-OUT.md).
type ClusterMemberConfig struct {
	// EtcdMember runs the etcd member of <state dir>/cluster/etcd.yml
	// beside rackd, started before the store is opened and stopped after
	// it is closed.
	EtcdMember bool `toml:"etcd_member"`
	// EtcdBinary is the etcd executable (looked up on PATH).
	EtcdBinary string `toml:"etcd_binary"`
	// StartTimeout bounds the member's start and the first reach of a
	// quorum (the other appliances may be booting too).
	StartTimeout Duration `toml:"start_timeout"`
	// ListenTLS serves the API over TLS too, with the cluster's server
	// certificate: joins and the other agents' blob fetches come there.
	ListenTLS string `toml:"listen_tls"`
}

// ClusterDirName is the cluster's directory in the state directory: the
// CA, this appliance's certificates and keys, etcd.yml and the overlay.
const ClusterDirName = "cluster"

// ClusterOverlayFile, in the cluster directory, is the configuration that
// rackd cluster init and join write: it overrides the configuration file's
// store settings and [cluster], and the command line overrides it.
const ClusterOverlayFile = "rackd.toml"

// ClusterDir is the cluster directory of a state directory.
func ClusterDir(stateDir string) string { return filepath.Join(stateDir, ClusterDirName) }

// ClusterOverlay is what ClusterOverlayFile holds.
type ClusterOverlay struct {
	Store struct {
		URL        string `toml:"url"`
		EtcdPrefix string `toml:"etcd_prefix,omitempty"`
		EtcdCA     string `toml:"etcd_ca"`
		EtcdCert   string `toml:"etcd_cert"`
		EtcdKey    string `toml:"etcd_key"`
	} `toml:"store"`
	Cluster struct {
		Name         string `toml:"name"`
		AdvertiseURL string `toml:"advertise_url"`
		EtcdMember   bool   `toml:"etcd_member"`
		ListenTLS    string `toml:"listen_tls"`
	} `toml:"cluster"`
}

// NewClusterOverlay is the overlay of the member name whose cluster
// directory is in stateDir, on the store at storeURL; its agent is known to
// the others by its TLS listener.
func NewClusterOverlay(stateDir, storeURL, prefix, name, listenTLS string) ClusterOverlay {
	dir := ClusterDir(stateDir)
	var o ClusterOverlay
	o.Store.URL, o.Store.EtcdPrefix = storeURL, prefix
	o.Store.EtcdCA = filepath.Join(dir, etcdmember.CACert)
	o.Store.EtcdCert = filepath.Join(dir, etcdmember.CertFile(etcdmember.Client))
	o.Store.EtcdKey = filepath.Join(dir, etcdmember.KeyFile(etcdmember.Client))
	o.Cluster.EtcdMember, o.Cluster.ListenTLS = true, listenTLS
	o.Cluster.Name, o.Cluster.AdvertiseURL = name, "https://"+listenTLS
	return o
}

// WriteClusterOverlay writes o into stateDir's cluster directory.
func WriteClusterOverlay(stateDir string, o ClusterOverlay) error {
	var b bytes.Buffer
	b.WriteString("# Written by rackd cluster init/join: this appliance's etcd member and\n" +
		"# the shared store. It overrides rackd's configuration file; flags override it.\n")
	if err := toml.NewEncoder(&b).Encode(o); err != nil {
		return fmt.Errorf("cluster overlay: %w", err)
	}
	path := filepath.Join(ClusterDir(stateDir), ClusterOverlayFile)
	if err := atomicfile.WriteFile(path, b.Bytes(), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ApplyClusterOverlay overlays c with its state directory's cluster
// overlay, when there is one, and reports whether there was.
func ApplyClusterOverlay(c *Config) (bool, error) {
	path := filepath.Join(ClusterDir(c.StateDir), ClusterOverlayFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster overlay: %w", err)
	}
	if err := decodeConfig(string(b), c); err != nil {
		return true, fmt.Errorf("cluster overlay %s: %w", path, err)
	}
	return true, nil
}

// startMember starts this appliance's etcd member (cluster.etcd_member)
// and, when it joined as a learner, waits until it votes: a learner
// serves the store to nobody.
func (a *Agent) startMember(cfg Config) error {
	dir := ClusterDir(cfg.StateDir)
	conf := filepath.Join(dir, etcdmember.ConfigFile)
	m, err := etcdmember.ReadMember(conf)
	if err != nil {
		return fmt.Errorf("cluster.etcd_member: %w (rackd cluster init or join writes it)", err)
	}
	tc, err := etcdmember.ClientTLS(dir)
	if err != nil {
		return fmt.Errorf("cluster.etcd_member: %w", err)
	}
	p := &etcdmember.Process{Binary: cfg.Cluster.EtcdBinary, ConfigFile: conf, ClientURL: m.ClientURL, TLS: tc,
		StartTimeout: time.Duration(cfg.Cluster.StartTimeout), Log: a.log.With("member", m.Name)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Cluster.StartTimeout))
	defer cancel()
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("cluster.etcd_member: %w", err)
	}
	a.member, a.memberName = p, m.Name
	a.onClose("etcd member", p.Stop)
	// Only the other members answer for a learner.
	eps, _, err := etcdkv.Endpoints(cfg.Store.URL)
	if err != nil {
		return fmt.Errorf("cluster.etcd_member: store.url: %w", err)
	}
	others := slices.DeleteFunc(eps, func(e string) bool { return strings.TrimSuffix(e, "/") == m.ClientURL })
	if len(others) == 0 {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: others, TLS: tc, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("cluster.etcd_member: %w", err)
	}
	defer cli.Close()
	if err := etcdmember.Promote(ctx, cli, m); err != nil {
		return fmt.Errorf("cluster.etcd_member: %w", err)
	}
	return nil
}

// syncEndpoints keeps the etcd client's endpoints those of every member:
// an agent's store URL names the members there were when it joined. Only
// for the members rackd runs (cluster.etcd_member): a store.url an operator
// wrote may reach the members through addresses other than those they
// advertise (a proxy, NAT, a forwarder into a namespace), which syncing
// would replace with unreachable ones.
func (a *Agent) syncEndpoints(ctx context.Context) {
	if a.etcd == nil || !a.cfg.Cluster.EtcdMember {
		return
	}
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := a.etcd.Sync(sctx); err != nil && ctx.Err() == nil {
			a.log.Debug("sync etcd endpoints", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listenClusterTLS opens cluster.listen_tls, when set.
func (a *Agent) listenClusterTLS() (net.Listener, error) {
	if a.cfg.Cluster.ListenTLS == "" {
		return nil, nil
	}
	tc, err := etcdmember.ServerTLS(ClusterDir(a.cfg.StateDir))
	if err != nil {
		return nil, fmt.Errorf("cluster.listen_tls: %w", err)
	}
	ln, err := tls.Listen("tcp", a.cfg.Cluster.ListenTLS, tc)
	if err != nil {
		return nil, fmt.Errorf("cluster.listen_tls: %w", err)
	}
	return ln, nil
}
