package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"rackd/agent"
	"rackd/internal/seal"
	"rackd/store"
	"rackd/store/kv/etcdkv"
)

func storeGroup() *group {
	g := &group{name: "store", summary: "Move the database from its file into an etcd cluster (local, offline)."}
	g.verbs = []*verb{storeMigrateVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

func storeMigrateVerb() *verb {
	return &verb{
		name:     "migrate",
		synopsis: "--from FILE --to etcd://HOST:PORT[,...] [--etcd-prefix P] [--etcd-ca F] [--etcd-cert F --etcd-key F] [--etcd-user U --etcd-password-file F]",
		summary:  "copy a database file into an empty etcd cluster, then check it there (local, offline)",
		help: `Run it with rackd stopped: it reads FILE (a rackd.db, at this rackd's
schema: start this rackd on it once first if it is older), copies every
record into the cluster (which must hold no rackd data under the prefix),
then opens the store there and checks every invariant. Afterwards start
rackd with --store URL (or store.url). The BMC passwords stay sealed: every
agent on the cluster needs the secrets.key that sat beside FILE, and the
credential.key too, in its state directory.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			from := fs.String("from", "", "the database `FILE` to copy (rackd.db)")
			to := fs.String("to", "", "the etcd cluster's `URL`: etcd://HOST:PORT[,HOST:PORT...], etcds:// for TLS")
			var c agent.StoreConfig
			fs.StringVar(&c.EtcdPrefix, "etcd-prefix", "/rackd/", "the `PREFIX` of rackd's keys in the cluster")
			fs.StringVar(&c.EtcdCA, "etcd-ca", "", "the members' CA certificate `FILE` (PEM)")
			fs.StringVar(&c.EtcdCert, "etcd-cert", "", "this client's certificate `FILE` (PEM)")
			fs.StringVar(&c.EtcdKey, "etcd-key", "", "this client's key `FILE` (PEM)")
			fs.StringVar(&c.EtcdUser, "etcd-user", "", "etcd's auth `USER`")
			fs.StringVar(&c.EtcdPasswordFile, "etcd-password-file", "", "a `FILE` holding the etcd user's password")
			return func(e *env, _ []string) error {
				if *from == "" || *to == "" {
					return usagef("--from and --to are required")
				}
				c.URL = *to
				return migrateStore(e, *from, c)
			}
		},
	}
}

func migrateStore(e *env, from string, c agent.StoreConfig) error {
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	src, err := store.Open(from, store.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	defer src.Close()
	conn, err := agent.EtcdConn(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	db, cli, err := etcdkv.Dial(ctx, conn)
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	defer cli.Close()
	start := time.Now()
	n, err := store.MigrateInto(ctx, src, db)
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	fmt.Fprintf(e.stdout, "Copied %d records from %s to %s in %.1fs.\n", n, from, c.URL, time.Since(start).Seconds())
	// Check it there, opening the sealed secrets with the key file beside
	// the database when it is there (it is not created here).
	opts := store.Options{}
	keyFile := filepath.Join(filepath.Dir(from), agent.SecretsKeyFile)
	if _, err := os.Stat(keyFile); err == nil {
		opts.Secrets = seal.File{Path: keyFile}
	} else if errors.Is(err, fs.ErrNotExist) {
		opts.AcceptLostSecrets = true
	}
	dst, err := store.OpenEngine(db, c.URL, opts)
	if err != nil {
		return fmt.Errorf("store migrate: open the copy: %w", err)
	}
	defer dst.Close()
	if err := dst.Check(); err != nil {
		return fmt.Errorf("store migrate: the copy in %s fails its checks: %w", c.URL, err)
	}
	machines, err := dst.ListMachines(store.Filter{})
	if err != nil {
		return fmt.Errorf("store migrate: %w", err)
	}
	fmt.Fprintf(e.stdout, "Checked: every invariant holds in %s (%d machines). Start rackd with --store %s.\n", c.URL, len(machines), c.URL)
	return nil
}
