package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"rackd/store"
	"rackd/store/kv/etcdkv"
)

// openStore opens the database cfg names: the file in the state directory,
// or an etcd cluster (store.url). On etcd the client is closed after the
// store (closers run in reverse).
func (a *Agent) openStore(cfg Config, opts store.Options) (*store.Store, error) {
	if cfg.Store.URL == "" {
		return store.Open(filepath.Join(cfg.StateDir, store.FileName), opts)
	}
	conn, err := EtcdConn(cfg.Store)
	if err != nil {
		return nil, err
	}
	if a.member != nil {
		// The other appliances may be starting too: wait for a quorum
		// as long as for the member.
		conn.DialTimeout = time.Duration(cfg.Cluster.StartTimeout)
	}
	db, cli, err := etcdkv.Dial(context.Background(), conn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	a.onClose("etcd client", cli.Close)
	a.etcd = cli
	// A batch of operations in one etcd transaction would add up against
	// its per-transaction limits: the engine takes one at a time.
	opts.MaxBatch = 0
	return store.OpenEngine(db, cfg.Store.URL, opts)
}

// EtcdConn is how to reach the etcd cluster of c.
func EtcdConn(c StoreConfig) (etcdkv.Conn, error) {
	conn := etcdkv.Conn{URL: c.URL, Prefix: c.EtcdPrefix, CAFile: c.EtcdCA, CertFile: c.EtcdCert, KeyFile: c.EtcdKey, Username: c.EtcdUser}
	if c.EtcdPasswordFile != "" {
		b, err := os.ReadFile(c.EtcdPasswordFile)
		if err != nil {
			return conn, fmt.Errorf("store.etcd_password_file: %w", err)
		}
		conn.Password = strings.TrimSpace(string(b))
	}
	return conn, nil
}
